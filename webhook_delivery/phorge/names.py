"""How Phorge names its objects, written from each type's `*PHIDType::loadHandles()` and the storage
classes it calls (Phorge 07c1a51310), and how it reads a monogram typed by a person back (each type's
`canLoadNamedObject()`). Pure: the columns come in as arguments; object_names.py reads them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

# PhabricatorRepositoryType
GIT, MERCURIAL, SVN = "git", "hg", "svn"
MINIMUM_UNQUALIFIED_HASH = 7  # PhabricatorRepository
MINIMUM_QUALIFIED_HASH = 5
ID_MAX = 2**32 - 1  # the ids are `int(10) unsigned`: a larger one names nothing


@dataclass(frozen=True)
class ObjectName:
    """One object as Phorge's handle names it. `name`: the short name, the monogram where the type has one
    (T123, D45, rXYZabc123def456, P12), else the object's own name (a user's username, a project's name);
    `full_name`: with the title, as Phorge shows it (`T123: Fix the login`); `path`: its page in Phorge,
    to follow `phabricator.base-uri`. Names and titles are what people typed into Phorge: escape them."""

    name: str
    full_name: str
    path: str

    @property
    def rest(self) -> str:
        """What `full_name` says after `name` (`: Fix the login`), "" when nothing more; a full name that
        does not start with the name comes whole, after a space."""
        if self.full_name == self.name:
            return ""
        if self.full_name.startswith(self.name):
            return self.full_name[len(self.name) :]
        return f" {self.full_name}"


def _php_falsy(value: str) -> bool:
    # `if (!$title)` in PHP: the empty string and "0" are false.
    return value in ("", "0")


def _segment(value: str) -> str:
    """A name as one path segment: Phorge never makes one with a slash or a space, but a row is a row."""
    return quote(value, safe="")


def _by_id(letter: str, object_id: int, title: str, separator: str = ": ") -> ObjectName:
    monogram = f"{letter}{object_id}"
    return ObjectName(monogram, f"{monogram}{separator}{title}", f"/{monogram}")


def task(object_id: int, title: str) -> ObjectName:
    """ManiphestTaskPHIDType."""
    return _by_id("T", object_id, title)


def revision(object_id: int, title: str) -> ObjectName:
    """DifferentialRevisionPHIDType: getMonogram(), getURI()."""
    return _by_id("D", object_id, title)


def paste(object_id: int, title: str) -> ObjectName:
    """PhabricatorPastePastePHIDType: the full name is PhabricatorPaste::getFullName(), with no colon."""
    return _by_id("P", object_id, "(An Untitled Masterwork)" if _php_falsy(title) else title, " ")


def mock(object_id: int, name: str) -> ObjectName:
    """PholioMockPHIDType."""
    return _by_id("M", object_id, name)


def file(object_id: int, name: str) -> ObjectName:
    """PhabricatorFileFilePHIDType: the URI is PhabricatorFile::getInfoURI()."""
    return _by_id("F", object_id, name)


def countdown(object_id: int, title: str) -> ObjectName:
    """PhabricatorCountdownCountdownPHIDType."""
    return _by_id("C", object_id, title)


def poll(object_id: int, question: str) -> ObjectName:
    """PhabricatorSlowvotePollPHIDType."""
    return _by_id("V", object_id, question)


def legalpad(object_id: int, title: str) -> ObjectName:
    """PhabricatorLegalpadDocumentPHIDType: the name is `L3 <title>`, and no full name of its own."""
    name = f"L{object_id} {title}"
    return ObjectName(name, name, f"/L{object_id}")


def conpherence(object_id: int, title: str) -> ObjectName:
    """PhabricatorConpherenceThreadPHIDType: named by ConpherenceThread::getStaticTitle()."""
    shown = title or "Private Room"
    return ObjectName(shown, f"Z{object_id}: {shown}", f"/Z{object_id}")


def badge(object_id: int, name: str) -> ObjectName:
    """PhabricatorBadgesPHIDType."""
    return ObjectName(name, name, f"/badges/view/{object_id}/")


def dashboard(object_id: int, name: str) -> ObjectName:
    """PhabricatorDashboardDashboardPHIDType."""
    return ObjectName(name, name, f"/dashboard/view/{object_id}/")


def webhook(object_id: int, name: str) -> ObjectName:
    """HeraldWebhookPHIDType: the URI is HeraldWebhook::getURI()."""
    return ObjectName(name, f"Webhook {object_id} {name}", f"/herald/webhook/view/{object_id}/")


def user(username: str, real_name: str) -> ObjectName:
    """PhabricatorPeopleUserPHIDType: the full name is PhabricatorUser::getFullName()."""
    full = f"{username} ({real_name})" if real_name else username
    return ObjectName(username, full, f"/p/{_segment(username)}/")


def project(object_id: int, name: str, primary_slug: str | None, milestone_of: str | None = None) -> ObjectName:
    """PhabricatorProjectProjectPHIDType: named by PhabricatorProject::getDisplayName() (a milestone as
    `Parent (Sprint 9)`: `milestone_of` is its parent's name), at its hashtag's page when it has one."""
    shown = name if milestone_of is None else f"{milestone_of} ({name})"
    path = f"/tag/{_segment(primary_slug)}/" if primary_slug else f"/project/view/{object_id}/"
    return ObjectName(shown, shown, path)


def phriction(slug: str) -> ObjectName:
    """PhrictionDocumentPHIDType names a document by its title, which lives in phriction_content (a table
    this service is granted nothing on): here it is named by its slug, which Phorge also accepts as the
    document's name (`projects/webhooks/`). The URI is PhrictionDocument::getSlugURI()."""
    # phutil_escape_uri(): rawurlencode() with the slashes left as they are.
    path = "/w/" if slug == "/" else "/w/" + quote(slug, safe="/")
    return ObjectName(slug, slug, path)


@dataclass(frozen=True)
class Repository:
    """The columns of a `repository` row that its name and its commits' names come from."""

    id: int
    callsign: str | None
    vcs: str
    name: str = ""
    slug: str | None = None

    @property
    def monogram(self) -> str:
        """PhabricatorRepository::getMonogram()."""
        return f"r{self.callsign}" if self.callsign else f"R{self.id}"

    @property
    def uri(self) -> str:
        """PhabricatorRepository::getURI()."""
        if self.slug:
            return f"/source/{_segment(self.slug)}/"
        if self.callsign:
            return f"/diffusion/{self.callsign}/"
        return f"/diffusion/{self.id}/"

    def commit_name(self, identifier: str) -> str:
        """PhabricatorRepository::formatCommitName() (not local: always scoped): a git or Mercurial hash
        cut to 12 characters, a Subversion revision whole."""
        name = identifier[:12] if self.vcs in (GIT, MERCURIAL) else identifier
        scope = f"r{self.callsign}" if self.callsign else f"R{self.id}:"
        return scope + name

    def commit_uri(self, identifier: str) -> str:
        """PhabricatorRepository::getCommitURI() (PhabricatorRepositoryCommit::getURI() is the same)."""
        return f"/r{self.callsign}{identifier}" if self.callsign else f"/R{self.id}:{identifier}"


def repository(repo: Repository) -> ObjectName:
    """PhabricatorRepositoryRepositoryPHIDType."""
    return ObjectName(repo.monogram, f"{repo.monogram} {repo.name}", repo.uri)


def commit(repo: Repository, identifier: str, summary: str) -> ObjectName:
    """PhabricatorRepositoryCommitPHIDType (without the rewrite hint of an unreachable commit, which is in a
    table this service does not read)."""
    name = repo.commit_name(identifier)
    return ObjectName(name, f"{name}: {summary}" if summary else name, repo.commit_uri(identifier))


# -- monograms typed by a person ---------------------------------------------------------------------


@dataclass(frozen=True)
class ById:
    """A monogram that names an object by its id: T123 is the maniphest_task with id 123."""

    phid_type: str
    id: int


@dataclass(frozen=True)
class RepositoryRef:
    """`rXYZ` (a callsign) or `R4` (an id)."""

    callsign: str | None
    id: int | None


@dataclass(frozen=True)
class CommitRef:
    """A commit as Phorge resolves one (DiffusionCommitQuery::withIdentifiers): `rXYZabc12` or `R4:abc12`, a
    prefix of a hash (at least 5 characters) or a whole Subversion revision in that repository; or a bare
    hash prefix of at least 7 characters, which matches full 40-character hashes in any repository."""

    repository: RepositoryRef | None
    identifier: str


@dataclass(frozen=True)
class UserRef:
    """`@alice`."""

    username: str


Reference = ById | RepositoryRef | CommitRef | UserRef

# canLoadNamedObject() of each type named by `<letter><id>`; ASCII as PHP's \d is (Python's matches any digit).
_BY_ID = {
    "TASK": re.compile(r"T\d*[1-9]\d*", re.IGNORECASE | re.ASCII),
    "DREV": re.compile(r"D[1-9]\d*", re.IGNORECASE | re.ASCII),
    "PSTE": re.compile(r"P\d*[1-9]\d*", re.IGNORECASE | re.ASCII),
    "MOCK": re.compile(r"M\d*[1-9]\d*", re.IGNORECASE | re.ASCII),
    "FILE": re.compile(r"F\d*[1-9]\d*", re.ASCII),
    "CDWN": re.compile(r"C\d*[1-9]\d*", re.IGNORECASE | re.ASCII),
    "CONP": re.compile(r"Z\d*[1-9]\d*", re.IGNORECASE | re.ASCII),
    "LEGD": re.compile(r"L\d*[1-9]\d*", re.IGNORECASE | re.ASCII),
    "POLL": re.compile(r"V\d*[1-9]\d*", re.IGNORECASE | re.ASCII),
}
_REPOSITORY = re.compile(r"r([A-Z]+)|R([1-9]\d*)", re.ASCII)
# PhabricatorRepositoryCommitPHIDType::getCommitObjectNamePattern(), then DiffusionCommitQuery's split.
_COMMIT = re.compile(
    r"(?:r[A-Z]+:?|R[0-9]+:)[1-9]\d*"
    rf"|(?:r[A-Z]+:?|R[0-9]+:)[a-f0-9]{{{MINIMUM_QUALIFIED_HASH},40}}"
    rf"|[a-f0-9]{{{MINIMUM_UNQUALIFIED_HASH},40}}",
    re.ASCII,
)
_COMMIT_PARTS = re.compile(r"(?:[rR]([A-Z]+:?|[0-9]+:))?(.*)", re.DOTALL)
_USER = re.compile(r"@(.+)", re.DOTALL)


def _repository_ref(scope: str) -> RepositoryRef:
    scope = scope.rstrip(":")
    return RepositoryRef(None, int(scope)) if scope.isdigit() else RepositoryRef(scope, None)


def references(text: str) -> list[Reference]:
    """What Phorge would look `text` up as (one name, e.g. `T123`): none, one, or several where the
    patterns of several types match (`c1234567` is a countdown and a bare hash)."""
    found: list[Reference] = []
    for phid_type, pattern in _BY_ID.items():
        if pattern.fullmatch(text) and (object_id := int(text[1:])) <= ID_MAX:
            found.append(ById(phid_type, object_id))
    if match := _REPOSITORY.fullmatch(text):
        callsign, number = match.groups()
        if number is None or int(number) <= ID_MAX:
            found.append(RepositoryRef(callsign, None if number is None else int(number)))
    if _COMMIT.fullmatch(text) and (parts := _COMMIT_PARTS.fullmatch(text)):
        scope, identifier = parts.groups()
        found.append(CommitRef(None if scope is None else _repository_ref(scope), identifier))
    if match := _USER.fullmatch(text):
        found.append(UserRef(match.group(1)))
    return found
