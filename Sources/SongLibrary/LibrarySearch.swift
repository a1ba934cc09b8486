import AudioCore
import GRDB

extension SongLibrary {
    /// The longest search the library takes, in characters: a phone's search box is not a document.
    public static let searchLimit = 200
    /// The most words a search looks for.
    public static let searchWordLimit = 8

    /// The playable songs whose text fields (title, artist, language, genre, edition, creator, year, the duet's
    /// singers) hold every word of `text`, in any order, as a word or the start of one (as you type: `thek madch`
    /// finds "Thekenmädchen"), accents and case folded (`thekenmadchen` finds it too); best matches first (SQLite
    /// FTS5's BM25) — or, when more than ``rankedMatchLimit`` songs match (a letter typed), the first in the
    /// library's order. Empty text: the first songs by artist and title.
    ///
    /// Any text is safe: it is cut into words at anything that is not a letter or a digit, and each word is bound as
    /// a quoted FTS5 string, never spliced into SQL or into the query syntax.
    public func search(_ text: String, limit: Int = 50) throws(AudioError) -> [LibrarySong] {
        let words = Self.searchWords(text)
        let limit = max(1, min(limit, 1000))
        guard !words.isEmpty else {
            return try read("search") { db in
                try LibrarySong.fetchAll(
                    db, sql: "SELECT * FROM song WHERE problem IS NULL ORDER BY artist COLLATE NOCASE, title COLLATE NOCASE LIMIT ?",
                    arguments: [limit])
            }
        }
        let match = words.map { "\"\($0)\"*" }.joined(separator: " ")
        return try read("search") { db in
            // Ranking costs a score per match: a letter or two typed matches a quarter of a large library, then the
            // first songs in the library's order (by folder, as scanned) come back instead, at once.
            let matches = try Int.fetchOne(db, sql: "SELECT count(*) FROM song_search WHERE song_search MATCH ?", arguments: [match]) ?? 0
            let order = matches > Self.rankedMatchLimit ? "" : "ORDER BY rank"
            return try LibrarySong.fetchAll(
                db,
                sql: """
                    SELECT song.* FROM (SELECT rowid, rank FROM song_search WHERE song_search MATCH ? \(order) LIMIT ?) AS hit
                    JOIN song ON song.id = hit.rowid ORDER BY \(order.isEmpty ? "song.id" : "hit.rank, song.id")
                    """,
                arguments: [match, limit])
        }
    }

    /// The most matches a search ranks by relevance (BM25); beyond, the library's order.
    public static let rankedMatchLimit = 2000

    /// The words of a search: runs of letters and digits (Unicode), lower-cased, at most ``searchWordLimit`` of at
    /// most 64 characters, from the first ``searchLimit`` characters.
    static func searchWords(_ text: String) -> [String] {
        var words: [String] = []
        var current = ""
        for character in text.prefix(searchLimit) {
            if character.isLetter || character.isNumber {
                current.append(character)
            } else if !current.isEmpty {
                words.append(current)
                current = ""
            }
        }
        if !current.isEmpty { words.append(current) }
        return words.prefix(searchWordLimit).map { String($0.lowercased().prefix(64)) }
    }
}
