"""opzoo-aot plugin."""
