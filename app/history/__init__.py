"""Conversations kept on disk: the SQLite store and its types, the recorder that writes turns as they happen, export, resuming."""
