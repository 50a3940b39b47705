"""What the tests share: one way to run the suite, and the fake and toy subjects."""
