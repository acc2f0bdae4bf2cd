"""The manual's generated pages: the option reference tables from the options' declarations and
the command line's page from its parser (``python -m unaligned.manual``, run by ``./dev docs``;
``--check`` fails when a committed page differs from what the code says)."""
