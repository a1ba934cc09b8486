import AudioCore

/// Reads a file front to back through a fixed window, for parsers that walk a container header by header: memory
/// stays at the window's size however large the file is.
final class FileWindow {
    let file: POSIXFile
    /// The file's size when opened.
    let size: Int64
    private var window: [UInt8]
    private var windowStart: Int64 = 0
    private var windowCount = 0

    init(path: String, windowBytes: Int = 1 << 20) throws(AudioError) {
        file = try POSIXFile(path: path, writing: false)
        size = file.size
        // No larger than the file: checking a small file does not clear a megabyte.
        window = [UInt8](repeating: 0, count: Int(max(1, min(Int64(windowBytes), size))))
    }

    /// Up to `count` bytes at `offset` (fewer at the end of the file). Requests larger than the window are read
    /// into an array of their own.
    func bytes(at offset: Int64, count: Int) throws(AudioError) -> ArraySlice<UInt8> {
        let available = Int(max(0, min(Int64(count), size - offset)))
        guard available > 0 else { return [] }
        if offset >= windowStart, offset + Int64(available) <= windowStart + Int64(windowCount) {
            let from = Int(offset - windowStart)
            return window[from..<from + available]
        }
        if available > window.count { return try file.readBytes(count: available, at: offset)[...] }
        var failure: AudioError?
        let got = window.withUnsafeMutableBytes { raw -> Int in
            do throws(AudioError) {
                return try file.read(into: raw.baseAddress!, count: raw.count, at: offset)
            } catch {
                failure = error
                return 0
            }
        }
        if let failure { throw failure }
        windowStart = offset
        windowCount = got
        return window[0..<min(available, got)]
    }
}
