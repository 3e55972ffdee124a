"""``python -m app`` runs the tokchat CLI."""
from app.cli import run

run()
