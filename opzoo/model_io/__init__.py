"""Model I/O: building models by name, weights in and out (Hub and directories, foreign checkpoints), layer
surgery for new shapes, model cards, load checks (`opzoo verify`) and the preset index."""
