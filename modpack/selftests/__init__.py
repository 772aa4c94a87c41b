"""Self-tests a library carries: ``export_library(..., selftests=[SelfTest(...)])`` bundles
inputs, expected outputs and tolerances for named functions into the artifact
(:mod:`.bundle`), and :func:`selftest` (``modpack selftest FILE --device D``) runs them on the
machine the library is deployed to, saying pass or fail per test (:mod:`.runner`)."""

from .runner import SelfTestResult, selftest
from .spec import SelfTest

__all__ = ["SelfTest", "SelfTestResult", "selftest"]
