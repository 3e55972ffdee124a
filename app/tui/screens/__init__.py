"""Full screens pushed over the chat (the token inspector)."""
