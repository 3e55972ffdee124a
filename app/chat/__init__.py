"""Opening and running a chat: settings to a ready chat (local or remote), the remote connection's checks, headless mode."""
