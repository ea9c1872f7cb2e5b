import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the shared _tiny helper (no tests/__init__.py)
