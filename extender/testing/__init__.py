"""Test-support code shipped with the extender (fakes and harnesses; never imported by production code)."""
