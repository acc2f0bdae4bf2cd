"""The one exceptions module: every error is an UnalignedError, and each also is the standard
exception a caller would naturally catch for its kind (ValueError for options, ...)."""

from __future__ import annotations

import inspect

import pytest

from unaligned import errors
from unaligned.errors import UnalignedError

ERROR_CLASSES = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, BaseException) and cls.__module__ == errors.__name__
]


def test_the_module_defines_the_errors_the_package_raises() -> None:
    names = {cls.__name__ for cls in ERROR_CLASSES}
    assert {"UnalignedError", "OptionError", "CommitLogError", "ChannelStateError"} <= names


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_is_an_unaligned_error_with_a_docstring(cls: type[BaseException]) -> None:
    assert issubclass(cls, UnalignedError)
    assert issubclass(cls, Exception)  # never BaseException only: `except Exception` catches it
    assert (cls.__doc__ or "").strip(), f"{cls.__name__} has no docstring"


@pytest.mark.parametrize(
    "cls, standard",
    [
        (errors.OptionError, ValueError),
        (errors.OffsetFormatError, errors.OptionError),
        (errors.SinkConfigurationError, errors.OptionError),
        (errors.KafkaUnavailableError, ConnectionError),
        (errors.TopicNotFoundError, LookupError),
        (errors.SchemaMismatchError, TypeError),
        (errors.InjectedFailureError, RuntimeError),
        (errors.TaskContextError, RuntimeError),
    ],
    ids=lambda c: c.__name__,
)
def test_errors_are_also_the_standard_exception_of_their_kind(
    cls: type[BaseException], standard: type[BaseException]
) -> None:
    assert issubclass(cls, standard)
    with pytest.raises(standard, match="option 'x'"):
        raise cls("option 'x' is wrong")


@pytest.mark.parametrize(
    "cls",
    [
        errors.TransactionCommitError,
        errors.CommitLogError,
        errors.ChannelStateError,
        errors.DataLossError,
    ],
    ids=lambda c: c.__name__,
)
def test_data_safety_errors_are_not_value_errors(cls: type[BaseException]) -> None:
    # Code that tolerates bad input with `except ValueError` (e.g. an unreadable idle-barrier
    # hint) must never swallow an error that stops the query to protect data.
    assert not issubclass(cls, (ValueError, TypeError, LookupError, OSError))
