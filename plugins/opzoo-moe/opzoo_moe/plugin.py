"""Entry point of the opzoo-moe plugin. It registers nothing yet: the distribution installs and is
discovered (`opzoo plugins`); its components come with their own issue."""
