"""tenure's fault-injection safety harness: real worker processes against real servers, a
recorded history, a checker that turns it into figures, and the report in docs/safety.md.

    .venv/bin/python -m safety run --profile full        # writes docs/safety.md

Not shipped in the wheel. How it works: docs/safety-method.md.
"""
