"""Settings: config.toml and its schema, the chat's options, server and tool settings, what is remembered per model."""
