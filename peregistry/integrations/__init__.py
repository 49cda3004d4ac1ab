"""Doors from the libraries users already hold a model in, each importing its library when it
is imported itself (``import peregistry`` imports none of them): :mod:`.transformers`
(``patch(model)``), :mod:`.torch` (``EncoderModule``), :mod:`.keras` (Keras 3 layers) and
:mod:`.flax` (a Flax NNX module). ``peregistry.torch``, ``peregistry.keras`` and
``peregistry.flax`` are the same modules' public paths."""
