"""JSON forms of a file's scan and of a whole catalog, for the catalog cache.

Plain lists in field order (compact, fast to load); decoding rebuilds the frozen records and
raises ``ValueError``/``TypeError`` on anything of the wrong shape, which the cache treats as a
miss.
"""

from __future__ import annotations

import dataclasses
import functools
import operator

from pipelines.core.catalog.infer import Conversion, Download, Needs
from pipelines.core.catalog.registry import Registration
from pipelines.core.catalog.scan import FileScan
from pipelines.core.model import Catalog, Problem, Requirement, Test

_TEST_FIELDS = tuple(f.name for f in dataclasses.fields(Test))
_test_values = operator.attrgetter(*_TEST_FIELDS)  # a test's fields in order, in one call
_TUPLE_AT = tuple(i for i, name in enumerate(_TEST_FIELDS) if name in {"labels", "args", "requirements", "unresolved",
                                                                             "also_suites"})


def encode_needs(n: Needs) -> list:
    """The JSON form of a file's needs; files share a few, so each is encoded once (the list is shared:
    never mutate it). Found by identity first: the parsers share one object per distinct needs, and
    hashing the nested frozen records costs more than the encoding."""
    hit = _BY_ID.get(id(n))
    if hit is not None and hit[0] is n:
        return hit[1]
    if len(_BY_ID) >= 4096:
        _BY_ID.clear()
    encoded = _encode_needs(n)
    _BY_ID[id(n)] = (n, encoded)  # holds n, so its id is not reused while the entry lives
    return encoded


_BY_ID: dict[int, tuple[Needs, list]] = {}


@functools.lru_cache(maxsize=4096)
def _encode_needs(n: Needs) -> list:
    return [[list(d.__dict__.values()) for d in n.downloads],
            [[c.model, c.source_model, c.path, [list(p) for p in c.params], c.line] for c in n.conversions],
            list(n.unresolved)]


def encode(scan: FileScan) -> list:
    return [scan.sha256, [list(r.__dict__.values()) for r in scan.registrations], encode_needs(scan.needs),
            scan.num_gpus, [[p.path, p.line, p.field, p.message] for p in scan.problems], scan.parsed, list(scan.notes),
            [list(r.__dict__.values()) for r in scan.withheld]]


#: many files download the same models: equal frozen records are built once and shared
_download = functools.lru_cache(maxsize=8192)(Download)
_conversion = functools.lru_cache(maxsize=8192)(Conversion)
_NO_NEEDS = Needs()


def decode(rel: str, data: list) -> FileScan:
    sha, regs, (downloads, conversions, unresolved), num_gpus, problems, parsed, notes, withheld = data
    registrations = []
    for r in regs:
        backend, suite, gpus, hardware, est, labels, nightly, disabled, line, assumed, literal = r
        registrations.append(Registration(backend, suite, gpus, hardware, est, tuple(labels), nightly, disabled, line, assumed,
                                          literal))
    needs = Needs(tuple(_download(*d) for d in downloads),
                  tuple(_conversion(m, s, p, tuple(tuple(x) for x in params), line)
                        for m, s, p, params, line in conversions),
                  tuple(unresolved)) if downloads or conversions or unresolved else _NO_NEEDS
    return FileScan(rel, sha, tuple(registrations), needs, num_gpus, tuple(Problem(*p) for p in problems), parsed,
                    tuple(notes), tuple(_withheld(r) for r in withheld) if withheld else ())


def _withheld(r: list) -> Registration:
    backend, suite, gpus, hardware, est, labels, nightly, disabled, line, assumed, literal = r
    return Registration(backend, suite, gpus, hardware, est, tuple(labels), nightly, disabled, line, assumed, literal)


def encode_catalog(c: Catalog) -> list:
    return [[list(_test_values(t)) for t in c.tests],
            [[r.kind, r.key, r.source, r.path, [list(p) for p in r.params], list(r.depends_on)] for r in c.requirements],
            [[p.path, p.line, p.field, p.message] for p in c.problems], list(c.assumptions)]


def decode_catalog(repo: str, data: list) -> Catalog:
    tests_raw, reqs_raw, problems_raw, assumptions = data
    tests = []
    width, env = len(_TEST_FIELDS), _TEST_FIELDS.index("env")
    for row in tests_raw:
        if len(row) != width:
            raise ValueError("a cached test has other fields than this code's Test")
        for i in _TUPLE_AT:
            row[i] = tuple(row[i])
        row[env] = tuple(tuple(kv) for kv in row[env])
        tests.append(Test(*row))
    reqs = tuple(Requirement(k, key, src, path, tuple(tuple(p) for p in params), tuple(dep))
                 for k, key, src, path, params, dep in reqs_raw)
    return Catalog(repo, tuple(tests), reqs, tuple(Problem(*p) for p in problems_raw), tuple(assumptions))
