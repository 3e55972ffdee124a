"""What a conversation is: messages and the conversation manager (session), branches, the context's breakdown, attachments."""
