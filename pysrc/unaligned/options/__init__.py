"""Options as declared: one :class:`~unaligned.options.declaration.OptionSpec` per option of the
source and the sink (name, default, parser, what it sets, a one-line meaning), which the
options modules validate with and ``unaligned.manual`` turns into the reference pages."""
