"""Column tables without pandas: the event table and the analysis' own tables.

Why not pandas: importing it costs a report ~40 MB of RSS and 0.15-0.25 s here, more than a
1 GB trace's whole event table, and the analysis reads its tables column by column as numpy
arrays anyway. So a table is an ordered set of equal-length columns, each a numpy array or a
``Categorical`` (integer codes into a list of strings: the kernel names of a 1 GB trace are
one copy of ~60 strings, not a million). ``to_pandas`` gives the DataFrame a library user or a
plot wants, with the same dtypes the readers used to build.

Missing categorical values have code -1, as in pandas. Grouping and summaries over these
columns are in copyprof/grouping.py.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


_PYTHON_STRINGS = False  # set by a copyprof command: see prefer_python_strings


def prefer_python_strings() -> None:
    """Have pandas store the string columns it makes as Python objects, not Arrow arrays, in
    this command's process (never on import: a library user's pandas options are theirs).
    pandas >= 3 picks Arrow storage whenever pyarrow is installed, and loading its compute
    library cost ~50 MB of RSS in a report (1 GB trace: 247 -> 197 MB, same JSON) for no speed
    gain at a census's sizes. pandas itself is not imported for it: a Kineto report needs no
    pandas, so the option is set now if pandas is loaded, else when ``load_pandas`` loads it."""
    global _PYTHON_STRINGS
    _PYTHON_STRINGS = True
    import sys

    if "pandas" in sys.modules:
        load_pandas()


def load_pandas() -> Any:
    """The pandas module, with this process's string storage applied (see prefer_python_strings).
    Code on a command's path imports pandas through this."""
    import importlib.util

    import pandas as pd

    if _PYTHON_STRINGS and importlib.util.find_spec("pyarrow") is not None:
        pd.set_option("mode.string_storage", "python")
    return pd


def filled(n: int, value: object) -> np.ndarray:
    """An object array of ``n`` references to one ``value``. (``np.full(n, "text", dtype=object)``
    casts through a string array and makes a new str object per element: 3.4 MB more per column
    at 65k copies, measured with memray at the analysis' peak.)"""
    out = np.empty(n, dtype=object)
    out.fill(value)
    return out


def constant(n: int, value: object) -> np.ndarray:
    """A read-only column of ``n`` rows that all hold ``value``, in no memory per row (a view
    with stride 0): a table's column that says the same for every row (no stacks, no role
    evidence, one rank) costs nothing. Indexing it gives an ordinary array; writing to it is
    an error, so code that fills a column row by row starts from ``filled``."""
    if isinstance(value, (str, bytes, tuple)) or value is None:
        one = np.empty((), dtype=object)
        one[()] = value
    else:
        one = np.asarray(value)
    return np.broadcast_to(one, (n,))


class Categorical:
    """A column of strings stored as integer codes into ``categories`` (-1: missing)."""

    __slots__ = ("codes", "categories")
    __hash__ = None  # type: ignore[assignment]  # == compares element-wise, as a column does

    def __init__(self, codes: np.ndarray, categories: Sequence[str] | np.ndarray) -> None:
        self.codes = np.asarray(codes)
        cats = np.empty(len(categories), dtype=object)
        cats[:] = list(categories)
        self.categories = cats

    @classmethod
    def from_values(cls, values: Iterable[Any], categories: Sequence[str] | None = None) -> Categorical:
        """Codes for ``values``; categories sorted (as pandas' Categorical(values) sorts them)
        unless given. A value that is not a category is missing (-1)."""
        arr = np.empty(0, dtype=object) if values is None else np.asarray(list(values) if not isinstance(values, np.ndarray)
                                                                           else values, dtype=object)
        if categories is None:
            categories = sorted({v for v in arr.tolist() if v is not None and v == v})
        index = {c: i for i, c in enumerate(categories)}
        codes = np.fromiter((index.get(v, -1) for v in arr.tolist()), dtype=np.int64, count=len(arr))
        return cls(codes.astype(_code_dtype(len(categories))), categories)

    def __len__(self) -> int:
        return len(self.codes)

    def code_of(self, value: str) -> int:
        """The code of ``value`` (-2, which no row has, when it is not a category)."""
        for code, category in enumerate(self.categories.tolist()):
            if category == value:
                return code
        return -2

    def __eq__(self, value: object) -> np.ndarray:  # type: ignore[override]
        return self.codes == self.code_of(str(value))

    def __ne__(self, value: object) -> np.ndarray:  # type: ignore[override]
        return ~self.__eq__(value)

    def flags(self, keep: Callable[[str], bool]) -> np.ndarray:
        """``keep(category)`` per code, plus a last False so that ``flags[codes]`` is False for
        a missing value (code -1): the test runs once per category, not once per row."""
        return np.array([bool(keep(str(c))) for c in self.categories.tolist()] + [False], dtype=bool)

    def isin(self, wanted: Collection[str]) -> np.ndarray:
        return self.flags(wanted.__contains__)[self.codes]

    def map(self, fn: Callable[[str], Any], dtype: Any = object) -> np.ndarray:
        """``fn(value)`` for every row, computed once per category (missing rows get fn(""))."""
        per_code = np.empty(len(self.categories) + 1, dtype=dtype)
        per_code[:-1] = [fn(str(c)) for c in self.categories.tolist()]
        per_code[-1] = fn("")
        return per_code[self.codes]

    def strings(self, missing: Any = "") -> np.ndarray:
        """Every row's value as an object array (``missing`` where the code is -1)."""
        per_code = np.empty(len(self.categories) + 1, dtype=object)
        per_code[:-1] = self.categories
        per_code[-1] = missing
        return per_code[self.codes]

    def take(self, index: np.ndarray) -> Categorical:
        return Categorical(self.codes[index], self.categories)

    def used(self) -> list[str]:
        """The categories some row has, in category order."""
        present = np.zeros(len(self.categories), dtype=bool)
        valid = self.codes[self.codes >= 0]
        present[valid] = True
        return [str(c) for c in self.categories[present].tolist()]

    def __repr__(self) -> str:
        return f"Categorical({len(self)} rows, {len(self.categories)} categories)"


Column = Union[np.ndarray, Categorical]


class Columns:
    """An ordered set of equal-length columns (numpy arrays or ``Categorical``), by name.

    ``table[name]`` is the column itself (no copy); ``table[mask]`` / ``table.take(index)`` a
    new table of those rows. Assigning a column of another length is an error."""

    __slots__ = ("_cols", "_n")

    def __init__(self, columns: Mapping[str, Any] | None = None, n: int | None = None) -> None:
        self._cols: dict[str, Column] = {}
        self._n = n
        for name, values in (columns or {}).items():
            self[name] = values
        if self._n is None:
            self._n = 0

    def __len__(self) -> int:
        return int(self._n or 0)

    @property
    def empty(self) -> bool:
        return len(self) == 0

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._cols)

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self._cols[key]
        if isinstance(key, (list, tuple)) and all(isinstance(k, str) for k in key):
            return Columns({k: self._cols[k] for k in key}, len(self))
        return self.take(np.asarray(key))

    def __setitem__(self, name: str, values: Any) -> None:
        col = values if isinstance(values, (Categorical, np.ndarray)) else _as_array(values, self._n)
        if isinstance(col, np.ndarray) and col.ndim == 0:
            col = filled(len(self), col.item()) if col.dtype.kind in "UO" else np.full(len(self), col.item(), dtype=col.dtype)
        if self._n is None:
            self._n = len(col)
        elif len(col) != self._n:
            raise ValueError(f"column {name} has {len(col)} values, the table {self._n} rows")
        self._cols[name] = col

    def get(self, name: str, default: Any = None) -> Any:
        return self._cols.get(name, default)

    def take(self, index: np.ndarray) -> Columns:
        """The rows at ``index`` (positions, or a boolean mask), in that order."""
        index = np.asarray(index)
        if index.dtype == bool and len(index) != len(self):
            raise ValueError(f"mask of {len(index)} rows for a table of {len(self)}")
        n = int(index.sum()) if index.dtype == bool else len(index)
        return Columns({k: c.take(index) if isinstance(c, Categorical) else c[index] for k, c in self._cols.items()}, n)

    def with_columns(self, **columns: Any) -> Columns:
        out = Columns(dict(self._cols), len(self))
        for k, v in columns.items():
            out[k] = v
        return out

    def strings(self, name: str, missing: Any = "") -> np.ndarray:
        """Column ``name`` as an object array of values (a categorical's strings)."""
        col = self._cols[name]
        return col.strings(missing) if isinstance(col, Categorical) else col.astype(object, copy=False)

    def rows(self, *names: str) -> Iterator[tuple[Any, ...]]:
        """The rows of the named columns as tuples of Python values."""
        cols: list[np.ndarray] = [self.strings(n, None) for n in names]
        return zip(*(c.tolist() for c in cols))

    def nbytes(self) -> int:
        return sum(c.codes.nbytes if isinstance(c, Categorical) else c.nbytes for c in self._cols.values())

    def to_pandas(self) -> pd.DataFrame:
        """The table as a DataFrame (categoricals as pandas Categoricals; numeric columns not copied)."""
        pd = load_pandas()
        data: dict[str, Any] = {}
        for name, col in self._cols.items():
            if isinstance(col, Categorical):
                data[name] = pd.Categorical.from_codes(col.codes, categories=pd.Index(col.categories.tolist(), dtype="str")
                                                       if len(col.categories) and all(isinstance(c, str) for c in col.categories)
                                                       else col.categories.tolist())
            else:
                data[name] = col
        return pd.DataFrame(data, columns=list(self._cols), copy=False)

    @classmethod
    def from_pandas(cls, frame: pd.DataFrame) -> Columns:
        """A DataFrame's columns (categoricals keep their codes and categories; others as numpy)."""
        pd = load_pandas()
        out = cls(n=len(frame))
        for name, col in frame.items():
            if isinstance(col.dtype, pd.CategoricalDtype):
                out[str(name)] = Categorical(col.cat.codes.to_numpy(), col.cat.categories.tolist())
            else:
                out[str(name)] = col.to_numpy()
        return out

    def __repr__(self) -> str:
        return f"Columns({len(self)} rows: {', '.join(self._cols)})"


def _as_array(values: Any, n: int | None) -> np.ndarray:
    if isinstance(values, (str, bytes)) or np.isscalar(values) or values is None:
        if n is None:
            raise ValueError("a scalar column needs a table with rows")
        return filled(n, values) if isinstance(values, (str, bytes)) or values is None else np.full(n, values)
    values = list(values) if not isinstance(values, (list, tuple)) else values
    arr = np.asarray(values)
    if arr.dtype.kind in "US":
        arr = np.asarray(values, dtype=object)
    return arr


def _code_dtype(n: int) -> Any:
    return np.int8 if n < 127 else np.int16 if n < 32767 else np.int32


def objects(values: Sequence[Any]) -> np.ndarray:
    """``values`` as a one-dimensional object column, one element per value (a tuple stays one
    element; ``np.array`` would make a list of equal-length tuples two-dimensional)."""
    return np.fromiter(values, dtype=object, count=len(values))
