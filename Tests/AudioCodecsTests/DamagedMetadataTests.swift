import Foundation
import LiveAudio
import Testing
import TestSupport

/// Numbers read from damaged metadata never reach an integer conversion unchecked: a stated length beyond any
/// real file is a typed error, not a trap.
@Suite struct DamagedMetadataTests {
    /// Ogg's CRC-32 (polynomial 0x04C11DB7, not reflected, initial value 0), so a page edited here still passes
    /// FFmpeg's check.
    static func oggCRC(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        var crc: UInt32 = 0
        for byte in bytes {
            crc ^= UInt32(byte) << 24
            for _ in 0..<8 { crc = crc & 0x8000_0000 != 0 ? crc << 1 ^ 0x04C1_1DB7 : crc << 1 }
        }
        return crc
    }

    /// An Ogg Vorbis file whose last page claims granule position 2⁶³ − 1: FFmpeg states a duration of
    /// 9.2 × 10¹⁸ samples, which as a frame count would overflow Int64. Opening it is a `.corruptFile` error naming
    /// the length; `encode` exits 1 with that message.
    @Test func anAbsurdOggLengthIsATypedError() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let good = dir.file("good.ogg")
        try FFmpeg.run(["-f", "lavfi", "-i", "sine=f=440:d=1:r=48000", "-c:a", "libvorbis", good])
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: good)))
        let magic = Array("OggS".utf8)
        let last = try #require((0...(bytes.count - 4)).last { Array(bytes[$0..<$0 + 4]) == magic })
        let segments = Int(bytes[last + 26])
        let size = 27 + segments + bytes[(last + 27)..<(last + 27 + segments)].reduce(0) { $0 + Int($1) }
        for i in 0..<8 { bytes[last + 6 + i] = i == 7 ? 0x7F : 0xFF }  // granule position, little-endian
        for i in 0..<4 { bytes[last + 22 + i] = 0 }
        let crc = Self.oggCRC(bytes[last..<(last + size)])
        for i in 0..<4 { bytes[last + 22 + i] = UInt8(crc >> (8 * UInt32(i)) & 0xFF) }
        let damaged = dir.file("damaged.ogg")
        try Data(bytes).write(to: URL(fileURLWithPath: damaged))
        #expect(try FFmpeg.probe(damaged)["duration_ts"] == "9223372036854775807", "FFmpeg reads the stated length")

        do {
            _ = try AudioFile.open(path: damaged)
            Issue.record("a file stating 2^63 samples was opened")
        } catch {
            #expect(error.code == .corruptFile && error.message.contains("states a length"), "\(error)")
        }
        let r = try runProcess(productsDirectory + "/liveaudio", ["encode", damaged, "-o", dir.file("out.wav")])
        #expect(r.status == 1 && r.stderr.contains("states a length"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.file("out.wav")))
        // The undamaged file opens, with its real length.
        #expect(try AudioFile.open(path: good).frameCount == 48_000)
    }
}
