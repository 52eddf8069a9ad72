import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Fast profile for every test run; `HYPOTHESIS_PROFILE=deep` for long fuzzing sessions. Tests that need
# more or fewer examples than the profile take a share of it (strategies.examples), so deep scales them too.
# 30 examples per property test (60 before, when the suite took ~100 s CPU, most of it in the per-grammar
# and per-sample property tests) keep the default suite near 45 s; the deep run is where the volume is.
settings.register_profile("ci", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("deep", max_examples=2200, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser):
    parser.addoption("--oracle", action="store_true", help="run the differential tests against transformers")
    parser.addoption("--engines", action="store_true", help="run the tests against the installed vLLM and SGLang")
    parser.addoption("--load", action="store_true", help="run the gateway's load and fault tests (tests/load)")
    parser.addoption("--distributed", action="store_true",
                     help="run the distributed recipes' smoke tests (tests/distributed: Ray, Spark, Dask, Daft)")
    parser.addoption("--browser", action="store_true", help="run the headless-browser test of the view (tests/browser)")
    parser.addoption("--constrain", action="store_true",
                     help="run the decoding-constraint tests (tests/constrain: llguidance and xgrammar)")
    parser.addoption("--redis", action="store_true",
                     help="run the Redis response store's tests (tests/redis: a redis-server they start themselves)")
    parser.addoption("--update-golden", action="store_true", help="rewrite golden .json files (review them!)")


#: The opt-in test folders and the option that asks for each: what they need is not in the test extra.
OPT_IN = {
    "differential": "--oracle",     # transformers (the `oracle` extra)
    "engines": "--engines",         # vLLM and SGLang, installed as the README's engine test group says
    "load": "--load",               # the gateway under hundreds of streams and 10,000 requests: minutes
    "distributed": "--distributed",  # Ray, Spark, Dask and Daft
    "browser": "--browser",         # Chromium and Playwright
    "constrain": "--constrain",     # llguidance and xgrammar
    "redis": "--redis",             # redis-server and the redis package (the `redis` extra)
}


def pytest_ignore_collect(collection_path, config):
    for folder, option in OPT_IN.items():
        if folder in collection_path.parts and not config.getoption(option):
            return True
    return None
