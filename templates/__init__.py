"""templates package."""
