"""Scripts the tests run as processes of their own (``python -m tests.support.children.NAME``
or by path), to kill, pause or drive them from the test."""
