from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GrantRequest(_message.Message):
    __slots__ = ("ttl_ms", "request_nonce", "session_secret")
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_NONCE_FIELD_NUMBER: _ClassVar[int]
    SESSION_SECRET_FIELD_NUMBER: _ClassVar[int]
    ttl_ms: int
    request_nonce: int
    session_secret: bytes
    def __init__(self, ttl_ms: _Optional[int] = ..., request_nonce: _Optional[int] = ..., session_secret: _Optional[bytes] = ...) -> None: ...

class GrantResponse(_message.Message):
    __slots__ = ("session_id", "ttl_ms", "session_secret")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    SESSION_SECRET_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    ttl_ms: int
    session_secret: bytes
    def __init__(self, session_id: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., session_secret: _Optional[bytes] = ...) -> None: ...

class KeepAliveRequest(_message.Message):
    __slots__ = ("session_id", "seq", "session_secret", "bind")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SESSION_SECRET_FIELD_NUMBER: _ClassVar[int]
    BIND_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    seq: int
    session_secret: bytes
    bind: bool
    def __init__(self, session_id: _Optional[int] = ..., seq: _Optional[int] = ..., session_secret: _Optional[bytes] = ..., bind: bool = ...) -> None: ...

class KeepAliveResponse(_message.Message):
    __slots__ = ("session_id", "seq", "ttl_ms")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    seq: int
    ttl_ms: int
    def __init__(self, session_id: _Optional[int] = ..., seq: _Optional[int] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class RevokeRequest(_message.Message):
    __slots__ = ("session_id", "request_seq", "session_secret")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SEQ_FIELD_NUMBER: _ClassVar[int]
    SESSION_SECRET_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    request_seq: int
    session_secret: bytes
    def __init__(self, session_id: _Optional[int] = ..., request_seq: _Optional[int] = ..., session_secret: _Optional[bytes] = ...) -> None: ...

class RevokeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteElectionRequest(_message.Message):
    __slots__ = ("election",)
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    election: str
    def __init__(self, election: _Optional[str] = ...) -> None: ...

class DeleteElectionResponse(_message.Message):
    __slots__ = ("existed", "index")
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    index: int
    def __init__(self, existed: bool = ..., index: _Optional[int] = ...) -> None: ...

class CampaignRequest(_message.Message):
    __slots__ = ("election", "session_id", "value", "request_seq", "session_secret")
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SEQ_FIELD_NUMBER: _ClassVar[int]
    SESSION_SECRET_FIELD_NUMBER: _ClassVar[int]
    election: str
    session_id: int
    value: bytes
    request_seq: int
    session_secret: bytes
    def __init__(self, election: _Optional[str] = ..., session_id: _Optional[int] = ..., value: _Optional[bytes] = ..., request_seq: _Optional[int] = ..., session_secret: _Optional[bytes] = ...) -> None: ...

class CampaignResponse(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: int
    def __init__(self, token: _Optional[int] = ...) -> None: ...

class ResignRequest(_message.Message):
    __slots__ = ("election", "session_id", "request_seq", "session_secret")
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SEQ_FIELD_NUMBER: _ClassVar[int]
    SESSION_SECRET_FIELD_NUMBER: _ClassVar[int]
    election: str
    session_id: int
    request_seq: int
    session_secret: bytes
    def __init__(self, election: _Optional[str] = ..., session_id: _Optional[int] = ..., request_seq: _Optional[int] = ..., session_secret: _Optional[bytes] = ...) -> None: ...

class ResignResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TransferRequest(_message.Message):
    __slots__ = ("election", "from_session_id", "to_session_id", "request_seq", "from_session_secret")
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    FROM_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TO_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SEQ_FIELD_NUMBER: _ClassVar[int]
    FROM_SESSION_SECRET_FIELD_NUMBER: _ClassVar[int]
    election: str
    from_session_id: int
    to_session_id: int
    request_seq: int
    from_session_secret: bytes
    def __init__(self, election: _Optional[str] = ..., from_session_id: _Optional[int] = ..., to_session_id: _Optional[int] = ..., request_seq: _Optional[int] = ..., from_session_secret: _Optional[bytes] = ...) -> None: ...

class TransferResponse(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: int
    def __init__(self, token: _Optional[int] = ...) -> None: ...

class LeaderRequest(_message.Message):
    __slots__ = ("election",)
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    election: str
    def __init__(self, election: _Optional[str] = ...) -> None: ...

class LeaderInfo(_message.Message):
    __slots__ = ("session_id", "value", "token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    value: bytes
    token: int
    def __init__(self, session_id: _Optional[int] = ..., value: _Optional[bytes] = ..., token: _Optional[int] = ...) -> None: ...

class LeaderResponse(_message.Message):
    __slots__ = ("leader",)
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: LeaderInfo
    def __init__(self, leader: _Optional[_Union[LeaderInfo, _Mapping]] = ...) -> None: ...

class ObserveRequest(_message.Message):
    __slots__ = ("election",)
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    election: str
    def __init__(self, election: _Optional[str] = ...) -> None: ...

class LeaderEvent(_message.Message):
    __slots__ = ("election", "leader", "index")
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    election: str
    leader: LeaderInfo
    index: int
    def __init__(self, election: _Optional[str] = ..., leader: _Optional[_Union[LeaderInfo, _Mapping]] = ..., index: _Optional[int] = ...) -> None: ...

class DeleteKeyRequest(_message.Message):
    __slots__ = ("key", "election", "token", "session_id", "request_seq", "session_secret")
    KEY_FIELD_NUMBER: _ClassVar[int]
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SEQ_FIELD_NUMBER: _ClassVar[int]
    SESSION_SECRET_FIELD_NUMBER: _ClassVar[int]
    key: str
    election: str
    token: int
    session_id: int
    request_seq: int
    session_secret: bytes
    def __init__(self, key: _Optional[str] = ..., election: _Optional[str] = ..., token: _Optional[int] = ..., session_id: _Optional[int] = ..., request_seq: _Optional[int] = ..., session_secret: _Optional[bytes] = ...) -> None: ...

class DeleteKeyResponse(_message.Message):
    __slots__ = ("existed", "index")
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    index: int
    def __init__(self, existed: bool = ..., index: _Optional[int] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class FencedValue(_message.Message):
    __slots__ = ("value", "election", "token", "index")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    value: bytes
    election: str
    token: int
    index: int
    def __init__(self, value: _Optional[bytes] = ..., election: _Optional[str] = ..., token: _Optional[int] = ..., index: _Optional[int] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: FencedValue
    def __init__(self, value: _Optional[_Union[FencedValue, _Mapping]] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ("key", "value", "election", "token", "session_id", "request_seq", "session_secret")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    ELECTION_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SEQ_FIELD_NUMBER: _ClassVar[int]
    SESSION_SECRET_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    election: str
    token: int
    session_id: int
    request_seq: int
    session_secret: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., election: _Optional[str] = ..., token: _Optional[int] = ..., session_id: _Optional[int] = ..., request_seq: _Optional[int] = ..., session_secret: _Optional[bytes] = ...) -> None: ...

class PutResponse(_message.Message):
    __slots__ = ("index",)
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: int
    def __init__(self, index: _Optional[int] = ...) -> None: ...

class BackupRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BackupHeader(_message.Message):
    __slots__ = ("cluster_id", "generation", "index", "term", "voters", "learners", "bytes", "sha256", "taken_unix_ms", "server_version")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    LEARNERS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    TAKEN_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    generation: int
    index: int
    term: int
    voters: _containers.RepeatedScalarFieldContainer[int]
    learners: _containers.RepeatedScalarFieldContainer[int]
    bytes: int
    sha256: str
    taken_unix_ms: int
    server_version: str
    def __init__(self, cluster_id: _Optional[str] = ..., generation: _Optional[int] = ..., index: _Optional[int] = ..., term: _Optional[int] = ..., voters: _Optional[_Iterable[int]] = ..., learners: _Optional[_Iterable[int]] = ..., bytes: _Optional[int] = ..., sha256: _Optional[str] = ..., taken_unix_ms: _Optional[int] = ..., server_version: _Optional[str] = ...) -> None: ...

class BackupChunk(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: BackupHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[BackupHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Member(_message.Message):
    __slots__ = ("id", "peer_addr", "client_addr", "voter", "http_addr")
    ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDR_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    HTTP_ADDR_FIELD_NUMBER: _ClassVar[int]
    id: int
    peer_addr: str
    client_addr: str
    voter: bool
    http_addr: str
    def __init__(self, id: _Optional[int] = ..., peer_addr: _Optional[str] = ..., client_addr: _Optional[str] = ..., voter: bool = ..., http_addr: _Optional[str] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("id", "role", "term", "leader_id", "leader_addr", "commit_index", "applied_index", "members", "version", "peers", "last_index", "usage", "generation")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDR_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    id: int
    role: str
    term: int
    leader_id: int
    leader_addr: str
    commit_index: int
    applied_index: int
    members: _containers.RepeatedCompositeFieldContainer[Member]
    version: str
    peers: _containers.RepeatedCompositeFieldContainer[PeerProgress]
    last_index: int
    usage: _containers.RepeatedCompositeFieldContainer[PrincipalUsage]
    generation: int
    def __init__(self, id: _Optional[int] = ..., role: _Optional[str] = ..., term: _Optional[int] = ..., leader_id: _Optional[int] = ..., leader_addr: _Optional[str] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., version: _Optional[str] = ..., peers: _Optional[_Iterable[_Union[PeerProgress, _Mapping]]] = ..., last_index: _Optional[int] = ..., usage: _Optional[_Iterable[_Union[PrincipalUsage, _Mapping]]] = ..., generation: _Optional[int] = ...) -> None: ...

class PrincipalUsage(_message.Message):
    __slots__ = ("principal", "sessions", "sessions_max", "elections", "elections_max", "keys", "keys_max", "key_bytes", "key_bytes_max")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_MAX_FIELD_NUMBER: _ClassVar[int]
    ELECTIONS_FIELD_NUMBER: _ClassVar[int]
    ELECTIONS_MAX_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    KEYS_MAX_FIELD_NUMBER: _ClassVar[int]
    KEY_BYTES_FIELD_NUMBER: _ClassVar[int]
    KEY_BYTES_MAX_FIELD_NUMBER: _ClassVar[int]
    principal: str
    sessions: int
    sessions_max: int
    elections: int
    elections_max: int
    keys: int
    keys_max: int
    key_bytes: int
    key_bytes_max: int
    def __init__(self, principal: _Optional[str] = ..., sessions: _Optional[int] = ..., sessions_max: _Optional[int] = ..., elections: _Optional[int] = ..., elections_max: _Optional[int] = ..., keys: _Optional[int] = ..., keys_max: _Optional[int] = ..., key_bytes: _Optional[int] = ..., key_bytes_max: _Optional[int] = ...) -> None: ...

class PeerProgress(_message.Message):
    __slots__ = ("id", "match_index", "last_contact_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_CONTACT_MS_FIELD_NUMBER: _ClassVar[int]
    id: int
    match_index: int
    last_contact_ms: int
    def __init__(self, id: _Optional[int] = ..., match_index: _Optional[int] = ..., last_contact_ms: _Optional[int] = ...) -> None: ...

class MemberRequest(_message.Message):
    __slots__ = ("id", "voter", "peer_addr", "client_addr", "http_addr")
    ID_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDR_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    HTTP_ADDR_FIELD_NUMBER: _ClassVar[int]
    id: int
    voter: bool
    peer_addr: str
    client_addr: str
    http_addr: str
    def __init__(self, id: _Optional[int] = ..., voter: bool = ..., peer_addr: _Optional[str] = ..., client_addr: _Optional[str] = ..., http_addr: _Optional[str] = ...) -> None: ...

class PromoteMemberRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class MembersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MembersResponse(_message.Message):
    __slots__ = ("members",)
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[Member]
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ...) -> None: ...

class TransferLeadershipRequest(_message.Message):
    __slots__ = ("to",)
    TO_FIELD_NUMBER: _ClassVar[int]
    to: int
    def __init__(self, to: _Optional[int] = ...) -> None: ...

class TransferLeadershipResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListElectionsRequest(_message.Message):
    __slots__ = ("after", "limit")
    AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    after: str
    limit: int
    def __init__(self, after: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ElectionSummary(_message.Message):
    __slots__ = ("name", "leader", "candidates", "since_index")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    SINCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    name: str
    leader: LeaderInfo
    candidates: _containers.RepeatedScalarFieldContainer[int]
    since_index: int
    def __init__(self, name: _Optional[str] = ..., leader: _Optional[_Union[LeaderInfo, _Mapping]] = ..., candidates: _Optional[_Iterable[int]] = ..., since_index: _Optional[int] = ...) -> None: ...

class ListElectionsResponse(_message.Message):
    __slots__ = ("elections", "more", "applied_index")
    ELECTIONS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    elections: _containers.RepeatedCompositeFieldContainer[ElectionSummary]
    more: bool
    applied_index: int
    def __init__(self, elections: _Optional[_Iterable[_Union[ElectionSummary, _Mapping]]] = ..., more: bool = ..., applied_index: _Optional[int] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("after", "limit")
    AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    after: int
    limit: int
    def __init__(self, after: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class SessionSummary(_message.Message):
    __slots__ = ("id", "ttl_ms", "remaining_ms", "elections")
    ID_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    ELECTIONS_FIELD_NUMBER: _ClassVar[int]
    id: int
    ttl_ms: int
    remaining_ms: int
    elections: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., remaining_ms: _Optional[int] = ..., elections: _Optional[_Iterable[str]] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "more", "applied_index")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[SessionSummary]
    more: bool
    applied_index: int
    def __init__(self, sessions: _Optional[_Iterable[_Union[SessionSummary, _Mapping]]] = ..., more: bool = ..., applied_index: _Optional[int] = ...) -> None: ...
