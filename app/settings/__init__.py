"""Settings: config.toml and its schema, their merge with the flags, the chat's options, server and tool settings, what is remembered per model."""
