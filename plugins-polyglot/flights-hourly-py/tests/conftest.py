import sys
from pathlib import Path

here = Path(__file__).resolve()
sys.path.insert(0, str(here.parents[1]))  # flights_hourly
sys.path.insert(0, str(here.parents[3] / "guest-sdk" / "python"))  # weir_guest
