import sys
from pathlib import Path

# tests/symbolic/rollouts.py is a helper module for this folder (no tests/__init__.py).
sys.path.insert(0, str(Path(__file__).parent))
