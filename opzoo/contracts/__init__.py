"""What components and plugins implement: the component interfaces, routers, the spectral-weight marker
and the plugin hookspecs."""
