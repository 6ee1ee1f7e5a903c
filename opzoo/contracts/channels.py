"""The name of a channel that holds no field of the data: padding, filled with the model's pad value. The fit writes it
into a fitted model's record (``pretrained_cfg["fields"]``) and :meth:`opzoo.Backbone.rollout` reads it there. Nothing
here imports torch."""

PAD = "<pad>"

__all__ = ["PAD"]
