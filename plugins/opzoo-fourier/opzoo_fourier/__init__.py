"""opzoo-fourier plugin."""
