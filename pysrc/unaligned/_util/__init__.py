"""The package's private helpers, used by every layer above: locations and atomic files
(``fs``), sealed JSON (``checksum``), Arrow arrays without pandas (``arrow``), values kept per
process (``process_memo``) and the named crash points of the protocol's tests
(``crash_points``). Nothing here is public API."""
