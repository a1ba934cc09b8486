/// Who sings next: the queue's rule as a pure function over its state, tested without audio or a database (the
/// evening's queue, ``SongLibrary/queue()``, keeps the state in SQLite and asks this).
///
/// The rule (Karaoke Eternal's "automatic, fair and predictable"): the next song belongs to the singer who sang least
/// recently among those waiting — one who has not sung yet first, those in the order they first queued — and each
/// singer's own songs come in the order that singer queued them. So a singer's second song waits until everyone else
/// with a song waiting has sung. Two things stand above the rule: the entry whose countdown has started ("up next":
/// it no longer moves), and the entries the host placed by hand (in the host's order).
public struct QueueRotation: Sendable, Equatable {
    /// A waiting entry as the rule sees it.
    public struct Entry: Sendable, Equatable {
        /// The entry's id.
        public var id: Int64
        /// The singer who queued it (whose turn it takes).
        public var singer: Int64
        /// The duet partner, if any: marked as having sung too when it is sung.
        public var partner: Int64?
        /// When it was queued (any increasing number: the queue's sequence).
        public var queued: Int64
        /// The host's place for it (1 first), nil when the rule places it.
        public var pinned: Int?

        /// Creates an entry.
        public init(id: Int64, singer: Int64, partner: Int64? = nil, queued: Int64, pinned: Int? = nil) {
            self.id = id
            self.singer = singer
            self.partner = partner
            self.queued = queued
            self.pinned = pinned
        }
    }

    /// The waiting entries, in any order.
    public var entries: [Entry]
    /// When each singer last sang (the queue's sequence at the end of their song); absent: not yet this evening.
    public var lastSang: [Int64: Int64]
    /// The entry whose countdown has started: first whatever the rule says.
    public var upNext: Int64?

    /// Creates the state.
    public init(entries: [Entry], lastSang: [Int64: Int64] = [:], upNext: Int64? = nil) {
        self.entries = entries
        self.lastSang = lastSang
        self.upNext = upNext
    }

    /// The waiting entries in the order they will be sung, as things stand: up next, then the host's pinned entries
    /// in the host's order, then the rule's rotation — which assumes each entry is sung in turn (its singer and
    /// partner then count as having sung most recently).
    public func order() -> [Int64] {
        var result: [Int64] = []
        var sang = lastSang
        var clock = (sang.values.max() ?? 0) + 1
        func sing(_ entry: Entry) {
            result.append(entry.id)
            sang[entry.singer] = clock
            if let partner = entry.partner { sang[partner] = clock }
            clock += 1
        }
        var rest = entries
        if let upNext, let index = rest.firstIndex(where: { $0.id == upNext }) { sing(rest.remove(at: index)) }
        let pinned = rest.filter { $0.pinned != nil }.sorted { ($0.pinned!, $0.queued, $0.id) < ($1.pinned!, $1.queued, $1.id) }
        for entry in pinned { sing(entry) }
        rest.removeAll { $0.pinned != nil }
        // Each singer's own entries, in the order they queued them.
        var bySinger: [Int64: [Entry]] = [:]
        for entry in rest.sorted(by: { ($0.queued, $0.id) < ($1.queued, $1.id) }) { bySinger[entry.singer, default: []].append(entry) }
        while !bySinger.isEmpty {
            // Least recently sung first; never sung before all who have; ties by who queued first.
            let next = bySinger.min { a, b in
                let sa = sang[a.key] ?? Int64.min, sb = sang[b.key] ?? Int64.min
                if sa != sb { return sa < sb }
                return (a.value[0].queued, a.value[0].id) < (b.value[0].queued, b.value[0].id)
            }!
            var own = next.value
            let entry = own.removeFirst()
            bySinger[next.key] = own.isEmpty ? nil : own
            sing(entry)
        }
        return result
    }

    /// The entry to sing next, nil when none waits.
    public func next() -> Int64? { order().first }
}
