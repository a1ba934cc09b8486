import AudioCore
import CFFmpeg

/// FFmpeg's libraries, loaded when first needed (a run that only reads and writes WAV files, plays or records loads
/// none of them: see CFFmpeg.h). Every entry point into FFmpeg calls ``load()`` first; ``ff`` is their functions.
enum FFmpegLibraries {
    private static let loaded: Result<la_ffmpeg, AudioError> = {
        var error: UnsafePointer<CChar>?
        guard let table = la_ffmpeg_load(&error) else {
            return .failure(
                AudioError(
                    .resourceUnavailable,
                    "FFmpeg's libraries cannot be loaded (\(error.map { String(cString: $0) } ?? "unknown")): install "
                        + "libavcodec, libavformat, libavutil and libswresample (scripts/install-deps.sh)"))
        }
        return .success(table.pointee)
    }()

    /// Loads the libraries (once, from any thread).
    /// - Throws: ``AudioError`` `.resourceUnavailable` naming what is missing.
    static func load() throws(AudioError) { _ = try loaded.get() }

    /// The functions, once ``load()`` has succeeded.
    static var functions: la_ffmpeg {
        guard case .success(let table) = loaded else { preconditionFailure("FFmpegLibraries.load() comes first") }
        return table
    }
}

/// FFmpeg's functions (``FFmpegLibraries/load()`` first).
var ff: la_ffmpeg { FFmpegLibraries.functions }
