#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import AudioCore
import CSystemCalls

/// A file descriptor with positional reads and full writes; errors become ``AudioError`` `.fileIO` naming the path.
/// Reads and writes never allocate.
final class POSIXFile {
    let path: String
    private(set) var fd: Int32

    /// Creates `path`, which must not exist yet, not even as a link (`O_CREAT | O_EXCL | O_NOFOLLOW`): nil when
    /// something is already there, so the caller can pick another name.
    static func createNew(path: String) throws(AudioError) -> POSIXFile? {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        if fd < 0, errno == EEXIST { return nil }
        guard fd >= 0 else { throw AudioError(.fileIO, "cannot create '\(path)': \(errnoDescription())") }
        return POSIXFile(path: path, fd: fd)
    }

    private init(path: String, fd: Int32) {
        self.path = path
        self.fd = fd
    }

    init(path: String, writing: Bool) throws(AudioError) {
        self.path = path
        fd = writing ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644) : open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw AudioError(.fileIO, "cannot \(writing ? "create" : "open") '\(path)': \(errnoDescription())")
        }
        if !writing {
            var st = stat()
            if fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR {
                sysClose(fd)
                fd = -1
                throw AudioError(.fileIO, "cannot open '\(path)': it is a directory")
            }
        }
    }

    deinit { close() }

    func close() {
        if fd >= 0 { sysClose(fd) }
        fd = -1
    }

    var size: Int64 {
        var st = stat()
        return fstat(fd, &st) == 0 ? Int64(st.st_size) : 0
    }

    /// Reads up to `count` bytes at `offset`; returns how many were read (fewer only at end of file).
    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws(AudioError) -> Int {
        var done = 0
        while done < count {
            let n = pread(fd, buffer + done, count - done, off_t(offset) + off_t(done))
            if n == 0 { break }
            if n < 0 {
                if errno == EINTR { continue }
                throw AudioError(.fileIO, "cannot read '\(path)': \(errnoDescription())")
            }
            done += n
        }
        return done
    }

    /// Reads up to `count` bytes at `offset` into a new array (header parsing; allocates).
    func readBytes(count: Int, at offset: Int64) throws(AudioError) -> [UInt8] {
        let raw = UnsafeMutableRawPointer.allocate(byteCount: max(count, 1), alignment: 8)
        defer { raw.deallocate() }
        let got = try read(into: raw, count: count, at: offset)
        return Array(UnsafeRawBufferPointer(start: raw, count: got))
    }

    /// Writes `bytes` (at `offset`, or at the current position).
    func write(bytes: [UInt8], at offset: Int64? = nil) throws(AudioError) {
        let raw = UnsafeMutableRawPointer.allocate(byteCount: max(bytes.count, 1), alignment: 8)
        defer { raw.deallocate() }
        raw.copyMemory(from: bytes, byteCount: bytes.count)
        try write(raw, count: bytes.count, at: offset)
    }

    /// Asks the kernel to start writing `count` bytes at `offset` to the disk without waiting (Linux
    /// `sync_file_range`). Advisory: it spreads the writeback a large file needs over the time it is written,
    /// instead of leaving it all to the moment the file is closed or renamed over another. Failures are ignored.
    func startWriteback(offset: Int64, count: Int64) {
        _ = la_start_writeback(fd, offset, count)
    }

    /// Waits until what was written is on the disk (`fsync`).
    func sync() throws(AudioError) {
        while fsync(fd) != 0 {
            if errno == EINTR { continue }
            throw AudioError(.fileIO, "cannot write '\(path)' to the disk: \(errnoDescription())")
        }
    }

    /// Each record (an ADTS frame, an FLV tag, a WAV chunk) is one call: a call that fails part-way is cut off
    /// whole (see `dropPartialWrite`).
    func write(_ buffer: UnsafeRawPointer, count: Int, at offset: Int64? = nil) throws(AudioError) {
        // The size before a positional write: a rewrite that ran past the end is cut back to it, never into what
        // was there before.
        let sizeBefore = offset == nil ? 0 : size
        var done = 0
        while done < count {
            let n =
                offset.map { pwrite(fd, buffer + done, count - done, off_t($0) + off_t(done)) }
                ?? sysWrite(fd, buffer + done, count - done)
            if n < 0 {
                if errno == EINTR { continue }
                let code = errno
                if done > 0 {
                    if let offset {
                        dropPartialWrite(start: max(offset, sizeBefore), end: offset + Int64(done), sequential: false)
                    } else {
                        let end = Int64(lseek(fd, 0, SEEK_CUR))
                        dropPartialWrite(start: end - Int64(done), end: end, sequential: true)
                    }
                }
                throw writeFailure(path: path, code: code)
            }
            done += n
        }
    }

    /// A write that failed part-way (a full disk takes what fits) leaves a piece of a record at the end of the file:
    /// a torn ADTS frame or FLV tag, which decoders report as damage. The piece is cut off, so the file ends at the
    /// last whole record. Only bytes this call added at the end of the file are cut (`start` ≤ `end` = the size).
    private func dropPartialWrite(start: Int64, end: Int64, sequential: Bool) {
        guard start >= 0, start < end, size == end else { return }
        guard ftruncate(fd, off_t(start)) == 0 else { return }
        if sequential { _ = lseek(fd, off_t(start), SEEK_SET) }
    }
}

/// The error for a write that failed with `code`, with what the user can do about a full disk or a size limit.
func writeFailure(path: String, code: Int32) -> AudioError {
    let reason = String(cString: strerror(code))
    switch code {
    case ENOSPC, EDQUOT:
        return AudioError(
            .fileIO,
            "cannot write '\(path)': the disk is full (\(reason)); free some space or write to another disk")
    case EFBIG:
        return AudioError(
            .fileIO,
            "cannot write '\(path)': the file reached the largest size allowed (\(reason)): the file system's limit "
                + "or the process's file size limit (ulimit -f)")
    default:
        return AudioError(.fileIO, "cannot write '\(path)': \(reason)")
    }
}

func errnoDescription() -> String { String(cString: strerror(errno)) }

/// Makes the entries of `directory` (a new or renamed file in it) durable: `fsync` on the folder itself.
/// - Throws: ``/AudioCore/AudioError`` `.fileIO`.
public func syncDirectory(_ directory: String) throws(AudioError) {
    let fd = open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard fd >= 0 else { throw AudioError(.fileIO, "cannot open folder '\(directory)': \(errnoDescription())") }
    defer { sysClose(fd) }
    while fsync(fd) != 0 {
        if errno == EINTR { continue }
        throw AudioError(.fileIO, "cannot write folder '\(directory)' to the disk: \(errnoDescription())")
    }
}

private func sysClose(_ fd: Int32) { _ = close(fd) }
private func sysWrite(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int { write(fd, buffer, count) }
