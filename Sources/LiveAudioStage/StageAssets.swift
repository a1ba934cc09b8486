import FoundationEssentials
import LiveAudio

#if canImport(Glibc)
import Glibc
#endif

/// The page and its files, shipped in the package as SwiftPM resources (`Sources/LiveAudioStage/Web`, copied
/// beside the built executable as `LiveAudio_LiveAudioStage.resources`) and read into memory once.
struct StageAssets: Sendable {
    struct File: Sendable {
        var bytes: [UInt8]
        var contentType: String
    }
    /// By URL path.
    var files: [(path: String, file: File)]

    static let bundleName = "LiveAudio_LiveAudioStage.resources"
    static let names: [(path: String, name: String, type: String)] = [
        ("/", "index.html", "text/html; charset=utf-8"),
        ("/stage.js", "stage.js", "text/javascript; charset=utf-8"),
        ("/stage.css", "stage.css", "text/css; charset=utf-8"),
    ]

    /// - Throws: ``AudioError`` `.fileIO` when the files are not beside the executable (it was copied without them).
    static func load() throws(AudioError) -> StageAssets {
        let folder = try folder()
        var files: [(path: String, file: File)] = []
        for entry in names {
            let path = folder + "/Web/" + entry.name
            guard let data = FileManager.default.contents(atPath: path) else {
                throw AudioError(.fileIO, "the stage's page is missing: \(path) cannot be read")
            }
            files.append((entry.path, File(bytes: Array(data), contentType: entry.type)))
        }
        return StageAssets(files: files)
    }

    /// The resources' folder: beside the running executable (as built, or installed with it).
    static func folder() throws(AudioError) -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard n > 0 else { throw AudioError(.fileIO, "the stage cannot find its own executable (/proc/self/exe)") }
        let executable = String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let directory = executable.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        let candidate = directory + "/" + bundleName
        guard FileManager.default.fileExists(atPath: candidate + "/Web/index.html") else {
            throw AudioError(
                .fileIO,
                "the stage's page is not installed: \(bundleName) must be beside \(executable) (copy it with the executable)")
        }
        return candidate
    }
}
