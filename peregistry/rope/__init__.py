"""The rotary position embedding engine: RoPE's frequencies and their scaling types
(:mod:`peregistry.rope.scalings`)."""
