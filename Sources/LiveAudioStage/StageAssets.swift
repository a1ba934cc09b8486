/// The page and its files (`Sources/LiveAudioStage/Web`), compiled into the executable: no CDN, no network, no
/// build step, nothing to install beside `liveaudio`. `StageFiles.swift` holds them, written by
/// `scripts/stage-files.py` from the folder; a test checks that it matches the folder.
///
/// Not SwiftPM resources: their generated accessor imports all of Foundation (for `Bundle`), which took the
/// executable from 96 to 145 MB and every command's resident memory up by 3 MB.
public struct StageAssets: Sendable {
    /// One file of the page: its bytes and the Content-Type it is served with.
    public struct File: Sendable {
        /// The file's content, as served.
        public var bytes: [UInt8]
        /// The Content-Type header's value (`text/html; charset=utf-8`, …).
        public var contentType: String
    }
    /// By URL path.
    public var files: [String: File]

    /// The file served at URL path `path` (`/`, `/stage.js`, `/stage.css`), or nil when there is none.
    public func file(at path: String) -> File? { files[path] }

    /// The page as shipped.
    public static let embedded = StageAssets(files: [
        "/": File(bytes: Array(StageFiles.indexHTML.utf8), contentType: "text/html; charset=utf-8"),
        "/stage.js": File(bytes: Array(StageFiles.stageJS.utf8), contentType: "text/javascript; charset=utf-8"),
        "/stage.css": File(bytes: Array(StageFiles.stageCSS.utf8), contentType: "text/css; charset=utf-8"),
        "/join": File(bytes: Array(StageFiles.joinHTML.utf8), contentType: "text/html; charset=utf-8"),
        "/phone.js": File(bytes: Array(StageFiles.phoneJS.utf8), contentType: "text/javascript; charset=utf-8"),
        "/mic.js": File(bytes: Array(StageFiles.micJS.utf8), contentType: "text/javascript; charset=utf-8"),
        "/mic-worklet.js": File(bytes: Array(StageFiles.micWorkletJS.utf8), contentType: "text/javascript; charset=utf-8"),
        "/lane.js": File(bytes: Array(StageFiles.laneJS.utf8), contentType: "text/javascript; charset=utf-8"),
    ])

    /// The folder the files come from, and the name each has there.
    public static let sources: [(path: String, name: String)] = [
        ("/", "index.html"), ("/stage.js", "stage.js"), ("/stage.css", "stage.css"), ("/join", "join.html"), ("/phone.js", "phone.js"),
        ("/mic.js", "mic.js"), ("/mic-worklet.js", "mic-worklet.js"), ("/lane.js", "lane.js"),
    ]
}
