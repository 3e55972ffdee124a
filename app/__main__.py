"""``python -m app`` runs the tokchat CLI."""
import sys

from app.cli import main

sys.exit(main())
