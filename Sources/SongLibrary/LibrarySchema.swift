import GRDB

/// The library database's tables, created and brought up to date by migrations (a database written by an older
/// LiveAudio is migrated when opened; one written by a newer one is refused).
enum LibrarySchema {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("songs") { db in
            try db.execute(sql: """
                -- AUTOINCREMENT: a song's id is never given to another (a queue entry names its song by it).
                CREATE TABLE song (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    path TEXT NOT NULL UNIQUE,
                    kind TEXT NOT NULL,
                    title TEXT NOT NULL,
                    artist TEXT NOT NULL,
                    language TEXT, genre TEXT, edition TEXT, creator TEXT,
                    year INTEGER,
                    parts TEXT NOT NULL,
                    singers TEXT NOT NULL,
                    length REAL, audioLength REAL, bpm REAL,
                    audio TEXT, lyrics TEXT,
                    size INTEGER NOT NULL, modified INTEGER NOT NULL,
                    hash TEXT NOT NULL,
                    warnings TEXT NOT NULL,
                    problem TEXT
                );
                CREATE INDEX song_hash ON song(hash);
                CREATE INDEX song_order ON song(artist COLLATE NOCASE, title COLLATE NOCASE);
                -- Words in any order over the text fields, accents and case folded, prefixes indexed (as you type).
                CREATE VIRTUAL TABLE song_search USING fts5(
                    title, artist, language, genre, edition, creator, year, singers,
                    content='song', content_rowid='id',
                    tokenize='unicode61 remove_diacritics 2', prefix='1 2 3');
                -- Only playable songs are searched.
                CREATE TRIGGER song_search_insert AFTER INSERT ON song WHEN new.problem IS NULL BEGIN
                    INSERT INTO song_search(rowid, title, artist, language, genre, edition, creator, year, singers)
                    VALUES (new.id, new.title, new.artist, new.language, new.genre, new.edition, new.creator, new.year, new.singers);
                END;
                CREATE TRIGGER song_search_delete AFTER DELETE ON song WHEN old.problem IS NULL BEGIN
                    INSERT INTO song_search(song_search, rowid, title, artist, language, genre, edition, creator, year, singers)
                    VALUES ('delete', old.id, old.title, old.artist, old.language, old.genre, old.edition, old.creator, old.year, old.singers);
                END;
                -- One trigger, its two statements in order (SQLite fires two triggers of one event in an order of
                -- its own: the new values indexed before the old were taken out corrupted the index).
                CREATE TRIGGER song_search_update AFTER UPDATE ON song BEGIN
                    INSERT INTO song_search(song_search, rowid, title, artist, language, genre, edition, creator, year, singers)
                    SELECT 'delete', old.id, old.title, old.artist, old.language, old.genre, old.edition, old.creator, old.year, old.singers
                    WHERE old.problem IS NULL;
                    INSERT INTO song_search(rowid, title, artist, language, genre, edition, creator, year, singers)
                    SELECT new.id, new.title, new.artist, new.language, new.genre, new.edition, new.creator, new.year, new.singers
                    WHERE new.problem IS NULL;
                END;
                -- The folders scanned: a scan without folders rescans them.
                CREATE TABLE root (path TEXT PRIMARY KEY, scanned REAL NOT NULL);
                """)
        }
        migrator.registerMigration("evening") { db in
            try db.execute(sql: """
                -- A singer: a name (and a phone's token), their usual key and difficulty, when they last sang.
                CREATE TABLE singer (
                    id INTEGER PRIMARY KEY,
                    name TEXT NOT NULL,
                    token TEXT UNIQUE,
                    key INTEGER NOT NULL DEFAULT 0,
                    difficulty TEXT NOT NULL DEFAULT 'medium',
                    joined REAL NOT NULL,
                    lastSang INTEGER
                );
                CREATE UNIQUE INDEX singer_name ON singer(name COLLATE NOCASE);
                -- The queue: a song, a singer (and a duet partner), each with a part, a key and a difficulty.
                CREATE TABLE entry (
                    id INTEGER PRIMARY KEY,
                    song INTEGER NOT NULL,
                    songHash TEXT NOT NULL,
                    singer INTEGER NOT NULL REFERENCES singer(id),
                    part INTEGER NOT NULL,
                    partner INTEGER REFERENCES singer(id),
                    partnerPart INTEGER,
                    key INTEGER NOT NULL,
                    difficulty TEXT NOT NULL,
                    queued INTEGER NOT NULL,
                    pinned INTEGER,
                    state TEXT NOT NULL,
                    added REAL NOT NULL,
                    ended REAL
                );
                CREATE INDEX entry_state ON entry(state);
                -- Every take's score.
                CREATE TABLE score (
                    id INTEGER PRIMARY KEY,
                    songHash TEXT NOT NULL,
                    song INTEGER,
                    title TEXT NOT NULL,
                    artist TEXT NOT NULL,
                    difficulty TEXT NOT NULL,
                    part INTEGER NOT NULL,
                    singer INTEGER,
                    singerName TEXT NOT NULL,
                    score INTEGER NOT NULL,
                    date REAL NOT NULL,
                    entry INTEGER
                );
                CREATE INDEX score_song ON score(songHash, difficulty, score DESC);
                -- The evening's settings and its clock: clock, cap, paused, the join address's token.
                CREATE TABLE evening (key TEXT PRIMARY KEY, value NOT NULL);
                """)
        }
        return migrator
    }
}
