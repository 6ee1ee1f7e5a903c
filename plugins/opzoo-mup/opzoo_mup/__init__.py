"""opzoo-mup plugin."""
