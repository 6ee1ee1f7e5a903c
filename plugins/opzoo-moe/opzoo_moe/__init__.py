"""opzoo-moe plugin."""
