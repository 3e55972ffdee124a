"""Models: resolving a name or path to a GGUF, presets, the Hugging Face hub and its cache, GGUF choice, the catalogue, the header read once, the bundled model."""
