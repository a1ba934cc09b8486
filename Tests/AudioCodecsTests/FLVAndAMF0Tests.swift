import AudioCodecs
import Foundation
import LiveAudio
import Testing
import TestSupport

/// A small FLV file made by the writer: 5 packets of fake AAC at 44.1 kHz stereo.
func smallFLV(in dir: TemporaryDirectory) throws -> [UInt8] {
    let path = dir.file("small.flv")
    let writer = try FLVFileWriter(
        path: path, sampleRate: 44_100, channelCount: 2, bitRate: 128_000, audioSpecificConfig: [0x12, 0x10])
    for n in 0..<5 {
        try writer.writeAAC([UInt8](repeating: UInt8(n), count: 10 + n), milliseconds: Int64((Double(n) * 1024_000 / 44_100).rounded()))
    }
    try writer.finish(duration: 5 * 1024 / 44_100)
    return Array(try Data(contentsOf: URL(fileURLWithPath: path)))
}

@Suite struct AMF0Tests {
    /// Known encodings from the AMF0 specification: markers, big-endian lengths and IEEE doubles.
    @Test func knownBytes() {
        #expect(AMF0.encode([.number(1)]) == [0x00, 0x3F, 0xF0, 0, 0, 0, 0, 0, 0])
        #expect(AMF0.encode([.boolean(true)]) == [0x01, 0x01])
        #expect(AMF0.encode([.string("ab")]) == [0x02, 0x00, 0x02, 0x61, 0x62])
        #expect(AMF0.encode([.null, .undefined]) == [0x05, 0x06])
        #expect(AMF0.encode([.object([AMF0Property("a", .null)])]) == [0x03, 0x00, 0x01, 0x61, 0x05, 0x00, 0x00, 0x09])
        #expect(
            AMF0.encode([.ecmaArray([AMF0Property("a", .boolean(false))])])
                == [0x08, 0, 0, 0, 1, 0x00, 0x01, 0x61, 0x01, 0x00, 0x00, 0x00, 0x09])
        #expect(AMF0.encode([.strictArray([.number(0)])]) == [0x0A, 0, 0, 0, 1, 0x00, 0, 0, 0, 0, 0, 0, 0, 0])
        #expect(AMF0.encode([.date(milliseconds: 0, timeZone: 0)]) == [0x0B, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    }

    /// Every type round-trips, nested; a string longer than 65535 bytes becomes a long string.
    @Test func roundTrip() throws {
        let long = String(repeating: "x", count: 70_000)
        let values: [AMF0Value] = [
            .string("connect"), .number(1),
            .object([
                AMF0Property("app", .string("live")), AMF0Property("audioCodecs", .number(0x0400)),
                AMF0Property("nested", .ecmaArray([AMF0Property("ok", .boolean(true)), AMF0Property("n", .null)])),
                AMF0Property("list", .strictArray([.number(1), .string("two"), .undefined])),
            ]),
            .date(milliseconds: 1_700_000_000_000, timeZone: 0), .string(long), .string("é ✓"),
        ]
        let bytes = AMF0.encode(values)
        #expect(try AMF0.decodeAll(bytes) == values)
        let longAt = AMF0.encode(Array(values.prefix(4))).count
        #expect(bytes[longAt] == 0x0C)
        #expect(values[2]["app"]?.stringValue == "live")
    }

    /// Every truncation of a valid encoding is a typed error (never a crash); so are unknown markers, bad UTF-8,
    /// absurd counts and nesting deeper than the limit. Random bytes never crash the reader.
    @Test func corruptInputIsATypedError() throws {
        let bytes = AMF0.encode([
            .string("onMetaData"),
            .ecmaArray([AMF0Property("duration", .number(3)), AMF0Property("list", .strictArray([.boolean(true)]))]),
        ])
        for cut in 1..<bytes.count {
            let prefix = Array(bytes.prefix(cut))
            do throws(AudioError) {
                let values = try AMF0.decodeAll(prefix)
                // Only a cut between the two values leaves something whole.
                #expect(values == [.string("onMetaData")] && cut == 13, "cut \(cut) parsed")
            } catch {
                #expect(error.code == .corruptFile)
            }
        }
        expectError(.corruptFile, containing: "unknown type marker") { _ = try AMF0.decodeAll([0x42]) }
        expectError(.corruptFile, containing: "a reference to value 1 of 0") { _ = try AMF0.decodeAll([0x07, 0, 1]) }
        expectError(.corruptFile, containing: "not supported") { _ = try AMF0.decodeAll([0x0E]) }  // record set: reserved
        expectError(.corruptFile, containing: "UTF-8") { _ = try AMF0.decodeAll([0x02, 0, 2, 0xC3, 0x28]) }
        expectError(.corruptFile, containing: "strict array") { _ = try AMF0.decodeAll([0x0A, 0xFF, 0xFF, 0xFF, 0xFF, 0x05]) }
        var deep: [UInt8] = []
        for _ in 0..<100 { deep += [0x0A, 0, 0, 0, 1] }
        deep.append(0x05)
        expectError(.corruptFile, containing: "nested more than") { _ = try AMF0.decodeAll(deep) }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<3000 {
            let noise = (0..<Int.random(in: 1...40, using: &generator)).map { _ in UInt8.random(in: 0...16, using: &generator) }
            _ = try? AMF0.decodeAll(noise)
        }
    }
}

@Suite struct AMFReferenceTests {
    static func nested(_ levels: Int, amf3: Bool, around inner: [UInt8]) -> [UInt8] {
        // AMF0: a strict array of one value; AMF3: a dense array of one value (no associative part).
        let level: [UInt8] = amf3 ? [0x09, 0x03, 0x01] : [0x0A, 0, 0, 0, 1]
        return (0..<levels).flatMap { _ in level } + inner
    }

    /// A value that a reference brings in counts as deep as it ends up nested: an array 40 deep holding a reference
    /// to another 40 deep is 80 levels, past the limit of 64, as if written out (its writer wrote it out, and no reader
    /// read that back — found by the AMF fuzz targets' round trips). 20 and 20 read, and write back to bytes that
    /// read back the same.
    @Test(arguments: [false, true]) func aReferenceCountsAsDeepAsItIsNested(amf3: Bool) throws {
        let leaf: [UInt8] = amf3 ? [0x01] : [0x05]
        let reference: [UInt8] = amf3 ? [0x09, 0x00] : [0x07, 0, 0]
        func decode(_ bytes: [UInt8]) throws(AudioError) -> [AMF0Value] {
            amf3 ? try AMF3Reader.decodeAll(bytes) : try AMF0.decodeAll(bytes)
        }
        let deep = Self.nested(40, amf3: amf3, around: leaf) + Self.nested(40, amf3: amf3, around: reference)
        #expect(throws: AudioError.self) { try decode(deep) }
        do throws(AudioError) { _ = try decode(deep) } catch { #expect(error.message.contains("nested more than 64 deep")) }
        let shallow = Self.nested(20, amf3: amf3, around: leaf) + Self.nested(20, amf3: amf3, around: reference)
        let values = try decode(shallow)
        #expect(values.count == 2)
        let written = AMF0.encode(values)
        #expect(AMF0.encode(try AMF0.decodeAll(written)) == written)
    }

    /// A long string referred to many times counts by its length: 1,000 references to an array holding a 4 KiB
    /// string stand for 4 MB of text, which the expansion bound refuses well before it is reached.
    @Test func referencesToLongStringsCountByLength() throws {
        let text = [UInt8](repeating: 0x61, count: 4096)
        var bytes: [UInt8] = [0x0A, 0, 0, 0, 1, 0x0C, 0, 0, 0x10, 0] + text  // [ "aaaa…" ] (index 0)
        let count = 300_000
        bytes += [0x0A] + withUnsafeBytes(of: UInt32(count).bigEndian) { Array($0) }
        for _ in 0..<count { bytes += [0x07, 0, 0] }
        #expect(throws: AudioError.self) { try AMF0.decodeAll(bytes) }
    }
}

@Suite struct FLVTests {
    /// The writer's file, read back: header, onMetaData with the fields players use, the sequence header with the
    /// AudioSpecificConfig, then one raw AAC tag per packet at round(n × 1024 × 1000 / rate) ms, each followed by
    /// a PreviousTagSize of 11 + its length.
    @Test func writerOutputParses() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let bytes = try smallFLV(in: dir)
        #expect(Array(bytes.prefix(13)) == [0x46, 0x4C, 0x56, 1, 4, 0, 0, 0, 9, 0, 0, 0, 0])
        let flv = try FLVContents(parsing: bytes)
        #expect(flv.header == FLVHeader(hasAudio: true, hasVideo: false))
        #expect(flv.tags.count == 7)
        let meta = try #require(flv.metadata)
        #expect(meta["audiocodecid"]?.numberValue == 10 && meta["stereo"]?.booleanValue == true)
        #expect(meta["audiosamplerate"]?.numberValue == 44_100 && meta["audiodatarate"]?.numberValue == 128)
        #expect(abs((meta["duration"]?.numberValue ?? 0) - 5 * 1024 / 44_100) < 1e-9)
        #expect(meta["filesize"]?.numberValue == Double(bytes.count))
        let sequence = try FLVAudio.parseAAC(flv.tags[1].data)
        #expect(sequence.packetType == 0 && Array(sequence.payload) == [0x12, 0x10] && sequence.stereo)
        #expect(flv.tags[1].data[0] == 0xAF)
        for n in 0..<5 {
            let tag = flv.tags[2 + n]
            #expect(tag.type == .audio)
            #expect(tag.timestamp == UInt32((Double(n) * 1024_000 / 44_100).rounded()))
            let aac = try FLVAudio.parseAAC(tag.data)
            #expect(aac.packetType == 1 && Array(aac.payload) == [UInt8](repeating: UInt8(n), count: 10 + n))
        }
        // Timestamps beyond 24 bits use the extension byte.
        let tag = FLVTag(type: .audio, timestamp: 0x0123_4567, data: [0xAF, 1])
        let encoded = tag.encoded()
        #expect(Array(encoded[4..<8]) == [0x23, 0x45, 0x67, 0x01])
        #expect(try FLVTag.parse(encoded, at: 0).0 == tag)
    }

    /// A header whose data offset puts the first tag beyond 64 KiB (legal, if odd): the file check agrees with the
    /// parse (it read at most 64 KiB of header and called such a file corrupt — found by reading for the fuzz targets).
    @Test func aFarDataOffsetIsReadAlikeByTheCheckAndTheParse() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let offset = 70_000
        var bytes: [UInt8] = [0x46, 0x4C, 0x56, 1, 4] + [UInt8(offset >> 24), UInt8((offset >> 16) & 0xFF), UInt8((offset >> 8) & 0xFF), UInt8(offset & 0xFF)]
        bytes += [UInt8](repeating: 0, count: offset - bytes.count + 4)
        bytes += FLVTag(type: .audio, timestamp: 0, data: [0xAF, 0, 0x11, 0x90]).encoded()
        let parsed = try FLVContents(parsing: bytes)
        let path = dir.file("far.flv")
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let checked = try FLVContents.check(path: path)
        #expect(parsed.tags.count == 1 && checked.tagCount == 1 && checked.audioTagCount == 1 && checked.header == parsed.header)
        // And a data offset past the end is the same error both ways.
        bytes[5...8] = [0, 0x10, 0, 0]
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        #expect(throws: AudioError.self) { try FLVContents(parsing: bytes) }
        #expect(throws: AudioError.self) { try FLVContents.check(path: path) }
    }

    /// Byte by byte: every prefix of a valid file either parses as the tags that are whole (a cut exactly
    /// between tags) or is a typed error. Never a crash.
    @Test func everyTruncationIsATypedError() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let bytes = try smallFLV(in: dir)
        var boundaries = Set<Int>()
        var offset = 13
        while offset < bytes.count {
            offset = try FLVTag.parse(bytes, at: offset).next
            boundaries.insert(offset)
        }
        for cut in 0..<bytes.count {
            let prefix = Array(bytes.prefix(cut))
            do throws(AudioError) {
                let flv = try FLVContents(parsing: prefix)
                #expect(boundaries.contains(cut) || cut == 13, "cut \(cut) parsed as \(flv.tags.count) tags")
            } catch {
                #expect(error.code == .corruptFile || error.code == .unsupportedFile, "\(error)")
                #expect(!boundaries.contains(cut), "cut \(cut) at a tag boundary failed: \(error)")
            }
        }
    }

    /// Corrupt fixtures, each with the error that names what is wrong.
    @Test func corruptFixtures() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let good = try smallFLV(in: dir)
        func corrupt(_ change: (inout [UInt8]) -> Void) -> [UInt8] {
            var b = good
            change(&b)
            return b
        }
        let firstTag = 13
        expectError(.unsupportedFile, containing: "does not start with 'FLV'") {
            _ = try FLVContents(parsing: corrupt { $0[0] = 0x47 })
        }
        expectError(.unsupportedFile, containing: "version 2") { _ = try FLVContents(parsing: corrupt { $0[3] = 2 }) }
        expectError(.corruptFile, containing: "header size") { _ = try FLVContents(parsing: corrupt { $0[8] = 3 }) }
        expectError(.corruptFile, containing: "PreviousTagSize0") { _ = try FLVContents(parsing: corrupt { $0[12] = 1 }) }
        expectError(.corruptFile, containing: "unknown tag type 7") {
            _ = try FLVContents(parsing: corrupt { $0[firstTag] = 7 })
        }
        expectError(.corruptFile, containing: "encrypted") { _ = try FLVContents(parsing: corrupt { $0[firstTag] |= 0x20 }) }
        expectError(.corruptFile, containing: "stream id") { _ = try FLVContents(parsing: corrupt { $0[firstTag + 9] = 1 }) }
        expectError(.corruptFile, containing: "truncated") {
            _ = try FLVContents(parsing: corrupt { $0[firstTag + 1] = 0x7F })  // a 8 MiB tag in a small file
        }
        // The last PreviousTagSize off by one.
        expectError(.corruptFile, containing: "PreviousTagSize after the tag") {
            _ = try FLVContents(parsing: corrupt { $0[$0.count - 1] ^= 1 })
        }
        // Metadata that is not AMF0.
        expectError(.corruptFile, containing: "AMF0") {
            _ = try FLVContents(parsing: corrupt { $0[firstTag + 11] = 0x42 })
        }
        expectError(.unsupportedFile, containing: "sound format 2") { _ = try FLVAudio.parseAAC([0x2F, 1]) }
        expectError(.corruptFile, containing: "AACPacketType 5") { _ = try FLVAudio.parseAAC([0xAF, 5]) }
        expectError(.corruptFile, containing: "empty audio tag") { _ = try FLVAudio.parseAAC([]) }
        // Random damage anywhere: a typed error or a file that still parses, never a crash.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            var b = good
            for _ in 0..<3 { b[Int.random(in: 0..<b.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator) }
            _ = try? FLVContents(parsing: b)
        }
    }

    /// ADTS streams: the writer's file walks frame by frame; a lost sync and a frame cut short are typed errors
    /// that give the byte offset.
    @Test func adtsStreamChecks() throws {
        var bytes: [UInt8] = []
        for n in 0..<4 {
            bytes += try ADTSHeader(sampleRate: 48_000, channelConfiguration: 2, payloadLength: 20 + n).encoded()
            bytes += [UInt8](repeating: 0x55, count: 20 + n)
        }
        #expect(try ADTSStream.frames(in: bytes).map(\.payloadLength) == [20, 21, 22, 23])
        var lost = bytes
        lost[27] = 0x00  // the second frame's sync word
        expectError(.corruptFile, containing: "frame 1 at byte 27") { _ = try ADTSStream.frames(in: lost) }
        expectError(.corruptFile, containing: "cut short") { _ = try ADTSStream.frames(in: Array(bytes.dropLast(5))) }
        expectError(.unsupportedFile, containing: "not an ADTS") { _ = try ADTSStream.frames(in: [0x00, 0x01, 0x02]) }
        let id3: [UInt8] = [0x49, 0x44, 0x33, 4, 0, 0, 0, 0, 0, 2, 0xAA, 0xBB]
        #expect(try ADTSStream.frames(in: id3 + bytes).count == 4)
        for cut in 0..<bytes.count { _ = try? ADTSStream.frames(in: Array(bytes.prefix(cut))) }
    }
}
