"""Test-suite configuration: a fixed Hypothesis profile so CI is reproducible.

``ci`` (the default): derandomized, bounded examples, no deadline, no example database.
Select ``HYPOTHESIS_PROFILE=dev`` locally for more, randomized examples.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=60,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
