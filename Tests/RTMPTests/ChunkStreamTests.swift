import LiveAudio
import Testing

// MARK: - Helpers

/// Every random test here is reproducible.
private typealias SeededGenerator = SplitMix64

/// A message and the chunk stream it travels on.
private struct ChunkedMessage: Hashable {
    var message: RTMPMessage
    var chunkStream: UInt32
}

/// `count` bytes of a pattern that differs from seed to seed.
private func testBytes(_ count: Int, seed: Int) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ seed &* 13 &+ ($0 >> 8)) }
}

/// A message of `length` pattern bytes on chunk stream `chunkStream`.
private func chunked(
    _ chunkStream: UInt32, _ type: RTMPMessageType, streamID: UInt32, timestamp: UInt32, length: Int
) -> ChunkedMessage {
    let seed = Int(chunkStream) &* 31 &+ Int(timestamp) &+ length
    return ChunkedMessage(
        message: RTMPMessage(type: type, streamID: streamID, timestamp: timestamp, payload: testBytes(length, seed: seed)),
        chunkStream: chunkStream)
}

/// Messages of many types, message streams, lengths (0 … 70000 bytes) and timestamps on chunk streams with 1-, 2-
/// and 3-byte basic headers. Timestamps only grow on each chunk stream; equal lengths with equal deltas make the
/// encoder use fmt 3 headers, and timestamps and deltas of 0xFFFFFF and more make it use extended timestamps.
private func variedTraffic() -> [ChunkedMessage] {
    let big: UInt32 = 0x1234_5678
    return [
        chunked(3, .commandAMF0, streamID: 0, timestamp: 0, length: 129),
        chunked(4, .audio, streamID: 1, timestamp: 0, length: 1),
        chunked(4, .audio, streamID: 1, timestamp: 23, length: 1),  // fmt 2
        chunked(4, .audio, streamID: 1, timestamp: 46, length: 1),  // fmt 3
        chunked(63, .video, streamID: 1, timestamp: 10, length: 5000),
        chunked(4, .audio, streamID: 1, timestamp: 69, length: 1),  // fmt 3, after another chunk stream
        chunked(64, .dataAMF0, streamID: 1, timestamp: 0, length: 0),
        chunked(64, .dataAMF0, streamID: 1, timestamp: 5, length: 127),  // fmt 1
        chunked(319, .audio, streamID: 2, timestamp: 100, length: 128),
        chunked(319, .audio, streamID: 2, timestamp: 100, length: 128),  // fmt 2, delta 0
        chunked(319, .audio, streamID: 2, timestamp: 100, length: 128),  // fmt 3, delta 0
        chunked(320, .video, streamID: 3, timestamp: 0xFF_FFFF, length: 300),  // extended, exactly at the boundary
        chunked(320, .video, streamID: 3, timestamp: 0xFF_FFFF + 8, length: 300),  // fmt 2
        chunked(320, .video, streamID: 3, timestamp: 0xFF_FFFF + 16, length: 300),  // fmt 3
        chunked(63, .video, streamID: 1, timestamp: 10 + 0x100_0000, length: 129),  // fmt 1 with an extended delta
        chunked(65_599, .audio, streamID: 0x0102_0304, timestamp: big, length: 70_000),  // extended, 547 chunks
        chunked(65_599, .audio, streamID: 0x0102_0304, timestamp: big + 23, length: 70_000),  // fmt 2
        chunked(65_599, .audio, streamID: 0x0102_0304, timestamp: big + 46, length: 70_000),  // fmt 3
        chunked(2, .userControl, streamID: 0, timestamp: 0, length: 6),
        chunked(3, .commandAMF0, streamID: 1, timestamp: 50, length: 200),  // another message stream: fmt 0
        chunked(4, .audio, streamID: 1, timestamp: 1092, length: 2),  // fmt 1
        chunked(4, .audio, streamID: 1, timestamp: 1092 + 0x100_0000, length: 2),  // fmt 2, extended delta
        chunked(4, .audio, streamID: 1, timestamp: 1092 + 0x200_0000, length: 2),  // the same extended delta
        chunked(4, .audio, streamID: 1, timestamp: 1092 + 0x200_0000 + 21, length: 2),
        chunked(5, RTMPMessageType(rawValue: 0x42), streamID: 9, timestamp: 7, length: 3),  // a type nobody knows
        chunked(128, .dataAMF0, streamID: 1, timestamp: 1, length: 129),
    ]
}

/// A few kilobytes of messages, for tests that decode many times.
private func smallTraffic() -> [ChunkedMessage] {
    [
        chunked(3, .commandAMF0, streamID: 0, timestamp: 0, length: 40),
        chunked(4, .audio, streamID: 1, timestamp: 0, length: 10),
        chunked(4, .audio, streamID: 1, timestamp: 21, length: 10),
        chunked(4, .audio, streamID: 1, timestamp: 42, length: 10),
        chunked(4, .audio, streamID: 1, timestamp: 63, length: 10),
        chunked(64, .dataAMF0, streamID: 1, timestamp: 0, length: 0),
        chunked(320, .video, streamID: 1, timestamp: 0x100_0000, length: 200),
        chunked(320, .video, streamID: 1, timestamp: 0x100_0000 + 20, length: 200),
        chunked(4, .audio, streamID: 1, timestamp: 84, length: 300),
        chunked(2, .userControl, streamID: 0, timestamp: 0, length: 6),
        chunked(65_599, .audio, streamID: 7, timestamp: 5, length: 130),
        chunked(4, .audio, streamID: 1, timestamp: 105, length: 300),
    ]
}

/// An encoded stream, every message a decoder should return from it (Set Chunk Size included), and the byte
/// offset at which each of those messages ends.
private struct EncodedTraffic {
    var bytes: [UInt8] = []
    var messages: [ChunkedMessage] = []
    var ends: [Int] = []
}

/// Encodes `traffic` with a new encoder: a Set Chunk Size to `chunkSizes[0]` first, the other sizes spread
/// evenly through the stream.
private func encodeTraffic(_ traffic: [ChunkedMessage], chunkSizes: [Int]) -> EncodedTraffic {
    var encoder = ChunkStreamEncoder()
    var result = EncodedTraffic()
    for (i, item) in traffic.enumerated() {
        for (k, size) in chunkSizes.enumerated() where k * traffic.count / chunkSizes.count == i {
            result.bytes += encoder.setChunkSizeMessage(size)
            result.messages.append(ChunkedMessage(message: ProtocolControl.setChunkSize(size), chunkStream: ChunkStreamID.control))
            result.ends.append(result.bytes.count)
        }
        encoder.encode(item.message, chunkStream: item.chunkStream, into: &result.bytes)
        result.messages.append(item)
        result.ends.append(result.bytes.count)
    }
    return result
}

/// Feeds `bytes` to `decoder` in consecutive pieces of the sizes `pieceSize` returns (at least 1 byte), taking
/// every complete message after each piece. A decoder that returns more messages than it was given bytes is
/// looping: that is an issue, and decoding stops.
private func decodeChunks(
    _ bytes: [UInt8], with decoder: inout ChunkStreamDecoder, pieceSize: () -> Int
) throws(AudioError) -> [ChunkedMessage] {
    var out: [ChunkedMessage] = []
    var offset = 0
    while offset < bytes.count {
        let n = min(max(1, pieceSize()), bytes.count - offset)
        decoder.append(bytes[offset..<offset + n])
        offset += n
        while let next = try decoder.nextMessage() {
            out.append(ChunkedMessage(message: next.message, chunkStream: next.chunkStream))
            guard out.count <= offset else {
                Issue.record("\(out.count) messages from \(offset) bytes: the decoder is looping")
                return out
            }
        }
    }
    return out
}

private func summary(_ m: ChunkedMessage) -> String {
    "\(m.message.type) on chunk stream \(m.chunkStream), message stream \(m.message.streamID), "
        + "t=\(m.message.timestamp), \(m.message.payload.count) bytes"
}

/// Compares message lists without printing megabytes of payload when they differ.
private func expectSameMessages(
    _ decoded: [ChunkedMessage], _ expected: [ChunkedMessage], _ context: String,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(
        decoded.count == expected.count, "\(context): \(decoded.count) messages, expected \(expected.count)",
        sourceLocation: sourceLocation)
    for (i, (d, e)) in zip(decoded, expected).enumerated() where d != e {
        Issue.record("\(context): message \(i) is \(summary(d)); expected \(summary(e))", sourceLocation: sourceLocation)
        return
    }
}

/// `body` must throw an `AudioError` `.protocolError` whose message contains `fragment`.
private func expectProtocolError(
    _ fragment: String, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
) {
    do {
        try body()
        Issue.record("no error; expected a protocol error mentioning '\(fragment)'", sourceLocation: sourceLocation)
    } catch let error as AudioError {
        #expect(error.code == .protocolError, "\(error)", sourceLocation: sourceLocation)
        #expect(error.message.contains(fragment), "\(error.message)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("not an AudioError: \(error)", sourceLocation: sourceLocation)
    }
}

/// Decoding `bytes`, whole and one byte at a time, must be a protocol error mentioning `fragment`.
private func expectDecodingFailure(
    _ bytes: [UInt8], _ fragment: String, sourceLocation: SourceLocation = #_sourceLocation,
    configure: (inout ChunkStreamDecoder) -> Void = { _ in }
) {
    for piece in [bytes.count, 1] {
        var decoder = ChunkStreamDecoder()
        configure(&decoder)
        expectProtocolError(fragment, sourceLocation: sourceLocation) {
            _ = try decodeChunks(bytes, with: &decoder) { piece }
        }
    }
}

/// `bytes` with one to four random edits: a flipped bit, a replaced, deleted or inserted byte, or a truncation.
private func mutate(_ bytes: [UInt8], using generator: inout SeededGenerator) -> [UInt8] {
    var b = bytes
    for _ in 0..<Int.random(in: 1...4, using: &generator) {
        guard !b.isEmpty else { break }
        let i = Int.random(in: 0..<b.count, using: &generator)
        switch Int.random(in: 0..<5, using: &generator) {
        case 0: b[i] ^= 1 << UInt8.random(in: 0...7, using: &generator)
        case 1: b[i] = UInt8.random(in: 0...255, using: &generator)
        case 2: b.remove(at: i)
        case 3: b.insert(UInt8.random(in: 0...255, using: &generator), at: i)
        default: b.removeSubrange(i...)
        }
    }
    return b
}

// MARK: - Encoding and decoding

@Suite("RTMP chunk streams: round trip")
struct ChunkRoundTripTests {
    @Test("Varied messages come back whole, in order, on their chunk streams, at chunk sizes 128, 4096 and changing mid-stream")
    func roundTrip() throws {
        let traffic = variedTraffic()
        for sizes in [[128], [4096], [128, 4096, 200]] {
            let encoded = encodeTraffic(traffic, chunkSizes: sizes)
            var decoder = ChunkStreamDecoder()
            let decoded = try decodeChunks(encoded.bytes, with: &decoder) { encoded.bytes.count }
            expectSameMessages(decoded, encoded.messages, "chunk sizes \(sizes)")
            #expect(decoded.count == traffic.count + sizes.count)
            #expect(decoder.chunkSize == sizes.last)
            #expect(decoder.bufferedByteCount == 0)
        }
    }

    @Test("A 3-byte command on chunk stream 3, message stream 0, time 0 is a 12-byte fmt 0 header and the payload")
    func exactBytes() throws {
        var encoder = ChunkStreamEncoder()
        var bytes: [UInt8] = []
        let message = RTMPMessage(type: .commandAMF0, streamID: 0, timestamp: 0, payload: [0xA1, 0xB2, 0xC3])
        encoder.encode(message, chunkStream: 3, into: &bytes)
        #expect(bytes == [0x03, 0, 0, 0, 0, 0, 3, 20, 0, 0, 0, 0, 0xA1, 0xB2, 0xC3])
        var decoder = ChunkStreamDecoder()
        let decoded = try decodeChunks(bytes, with: &decoder) { 1 }
        #expect(decoded == [ChunkedMessage(message: message, chunkStream: 3)])
    }

    @Test("Basic headers take 1, 2 or 3 bytes by chunk stream id; the message stream id is little-endian")
    func basicHeaders() throws {
        let message = RTMPMessage(type: .audio, streamID: 0x0102_0304, timestamp: 0x0A_0B0C, payload: [0x55])
        let cases: [(UInt32, [UInt8])] = [
            (2, [0x02]), (63, [0x3F]), (64, [0x00, 0x00]), (319, [0x00, 0xFF]), (320, [0x01, 0x00, 0x01]),
            (65_599, [0x01, 0xFF, 0xFF]),
        ]
        for (chunkStream, basicHeader) in cases {
            var encoder = ChunkStreamEncoder()
            var bytes: [UInt8] = []
            encoder.encode(message, chunkStream: chunkStream, into: &bytes)
            #expect(bytes == basicHeader + [0x0A, 0x0B, 0x0C, 0, 0, 1, 8, 4, 3, 2, 1, 0x55], "chunk stream \(chunkStream)")
            var decoder = ChunkStreamDecoder()
            let decoded = try decodeChunks(bytes, with: &decoder) { 1 }
            #expect(decoded == [ChunkedMessage(message: message, chunkStream: chunkStream)])
        }
    }

    @Test("Headers are compressed: ten equal audio messages at equal intervals take one fmt 0, one fmt 2 and eight fmt 3 headers")
    func headerCompression() throws {
        var encoder = ChunkStreamEncoder()
        var bytes: [UInt8] = []
        var starts: [Int] = []
        let messages = (0..<10).map {
            RTMPMessage(type: .audio, streamID: 1, timestamp: UInt32(1000 + 23 * $0), payload: testBytes(100, seed: $0))
        }
        for message in messages {
            starts.append(bytes.count)
            encoder.encode(message, chunkStream: 4, into: &bytes)
        }
        #expect(bytes.count < 10 * (12 + 100))
        #expect(bytes.count == 12 + 4 + 8 * 1 + 10 * 100)
        #expect(starts.map { bytes[$0] >> 6 } == [0, 2, 3, 3, 3, 3, 3, 3, 3, 3])
        #expect(Array(bytes[starts[1]..<starts[1] + 4]) == [0x84, 0, 0, 23])
        // A different length needs fmt 1 (delta, length, type): 8 bytes.
        var changed: [UInt8] = []
        let shorter = RTMPMessage(type: .audio, streamID: 1, timestamp: 1000 + 23 * 10, payload: testBytes(50, seed: 10))
        encoder.encode(shorter, chunkStream: 4, into: &changed)
        #expect(Array(changed.prefix(8)) == [0x44, 0, 0, 23, 0, 0, 50, 8])
        #expect(changed.count == 8 + 50)

        var decoder = ChunkStreamDecoder()
        let decoded = try decodeChunks(bytes + changed, with: &decoder) { 1 }
        #expect(decoded.map(\.message) == messages + [shorter])
        #expect(decoded.allSatisfy { $0.chunkStream == 4 })
    }

    @Test("setChunkSizeMessage is a Set Chunk Size on chunk stream 2 at the old size; the encoder and decoder then use the new size")
    func setChunkSize() throws {
        var encoder = ChunkStreamEncoder()
        #expect(encoder.chunkSize == 128)
        let setSize = encoder.setChunkSizeMessage(4096)
        #expect(setSize == [0x02, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0x10, 0])
        #expect(encoder.chunkSize == 4096)
        var one: [UInt8] = []
        encoder.encode(RTMPMessage(type: .audio, payload: testBytes(4096, seed: 1)), chunkStream: 4, into: &one)
        #expect(one.count == 12 + 4096)
        var two: [UInt8] = []
        encoder.encode(RTMPMessage(type: .audio, timestamp: 10, payload: testBytes(4097, seed: 2)), chunkStream: 4, into: &two)
        #expect(two.count == 8 + 4096 + 1 + 1)

        var decoder = ChunkStreamDecoder()
        #expect(decoder.chunkSize == 128)
        let decoded = try decodeChunks(setSize + one + two, with: &decoder) { 100 }
        #expect(decoder.chunkSize == 4096)
        #expect(decoded.map(\.message.payload.count) == [4, 4096, 4097])
        #expect(decoded.first?.message == ProtocolControl.setChunkSize(4096))
        #expect(decoded.last?.message.payload == testBytes(4097, seed: 2))
    }
}

@Suite("RTMP chunk streams: any split of the bytes")
struct ChunkSplitTests {
    @Test("Fed one byte at a time, the decoder returns the same messages")
    func byteByByte() throws {
        let encoded = encodeTraffic(variedTraffic(), chunkSizes: [128])
        var decoder = ChunkStreamDecoder()
        let decoded = try decodeChunks(encoded.bytes, with: &decoder) { 1 }
        expectSameMessages(decoded, encoded.messages, "one byte at a time")
        #expect(decoder.bufferedByteCount == 0)
    }

    @Test("Fed in random-sized pieces (seeded), the decoder returns the same messages")
    func randomPieces() throws {
        let encoded = encodeTraffic(variedTraffic(), chunkSizes: [128, 4096])
        for seed: UInt64 in 1...4 {
            var generator = SeededGenerator(seed: seed)
            let largest = seed.isMultiple(of: 2) ? 40 : 5000
            var decoder = ChunkStreamDecoder()
            let decoded = try decodeChunks(encoded.bytes, with: &decoder) { Int.random(in: 1...largest, using: &generator) }
            expectSameMessages(decoded, encoded.messages, "seed \(seed)")
        }
    }

    @Test("Every truncation of a valid stream gives exactly the messages that are whole in it, and no error")
    func truncations() throws {
        let encoded = encodeTraffic(smallTraffic(), chunkSizes: [128, 64])
        var generator = SeededGenerator(seed: 99)
        for cut in 0...encoded.bytes.count {
            var decoder = ChunkStreamDecoder()
            let decoded = try decodeChunks(Array(encoded.bytes[..<cut]), with: &decoder) {
                Int.random(in: 1...100, using: &generator)
            }
            let whole = encoded.ends.filter { $0 <= cut }.count
            guard decoded == Array(encoded.messages.prefix(whole)) else {
                Issue.record("cut at \(cut): \(decoded.count) messages, expected the first \(whole)")
                break
            }
        }
    }

    @Test("Two chunk streams alternating the chunks of two 300-byte messages: both come out whole")
    func interleaved() throws {
        let a = testBytes(300, seed: 3)
        let b = testBytes(300, seed: 4)
        var bytes: [UInt8] = [0x04, 0, 0, 10, 0, 0x01, 0x2C, 8, 1, 0, 0, 0]  // fmt 0, time 10, 300 bytes, audio, stream 1
        bytes += a[0..<128]
        bytes += [0x06, 0, 0, 20, 0, 0x01, 0x2C, 9, 1, 0, 0, 0]  // fmt 0, time 20, 300 bytes, video, stream 1
        bytes += b[0..<128]
        bytes += [0xC4]
        bytes += a[128..<256]
        bytes += [0xC6]
        bytes += b[128..<256]
        bytes += [0xC4]
        bytes += a[256...]
        bytes += [0xC6]
        bytes += b[256...]
        let expected = [
            ChunkedMessage(message: RTMPMessage(type: .audio, streamID: 1, timestamp: 10, payload: a), chunkStream: 4),
            ChunkedMessage(message: RTMPMessage(type: .video, streamID: 1, timestamp: 20, payload: b), chunkStream: 6),
        ]
        for piece in [bytes.count, 1, 5, 129] {
            var decoder = ChunkStreamDecoder()
            let decoded = try decodeChunks(bytes, with: &decoder) { piece }
            #expect(decoded == expected, "pieces of \(piece) bytes")
            #expect(decoder.bufferedByteCount == 0)
        }
        // Nothing is whole until A's last chunk (45 bytes before B's, which ends the stream), then A alone.
        for (cut, whole) in [(bytes.count - 90, 0), (bytes.count - 46, 0), (bytes.count - 45, 1), (bytes.count - 1, 1)] {
            var decoder = ChunkStreamDecoder()
            let decoded = try decodeChunks(Array(bytes.prefix(cut)), with: &decoder) { 1 }
            #expect(decoded == Array(expected.prefix(whole)), "the first \(cut) bytes")
        }
    }

    @Test("A timestamp of 0x1000000 uses the extended field, repeated after every fmt 3 continuation header, and decodes back")
    func extendedTimestampInContinuationChunks() throws {
        let payload = testBytes(300, seed: 9)
        let message = RTMPMessage(type: .audio, streamID: 1, timestamp: 0x100_0000, payload: payload)
        var encoder = ChunkStreamEncoder()
        var bytes: [UInt8] = []
        encoder.encode(message, chunkStream: 4, into: &bytes)
        var expected: [UInt8] = [0x04, 0xFF, 0xFF, 0xFF, 0x00, 0x01, 0x2C, 8, 1, 0, 0, 0, 0x01, 0x00, 0x00, 0x00]
        expected += payload[0..<128]
        expected += [0xC4, 0x01, 0x00, 0x00, 0x00]
        expected += payload[128..<256]
        expected += [0xC4, 0x01, 0x00, 0x00, 0x00]
        expected += payload[256...]
        #expect(bytes == expected)

        // The next message, 20 ms later, has a small delta (fmt 2): no extended field, not even in its
        // continuation chunks.
        let next = RTMPMessage(type: .audio, streamID: 1, timestamp: 0x100_0000 + 20, payload: testBytes(300, seed: 10))
        var nextBytes: [UInt8] = []
        encoder.encode(next, chunkStream: 4, into: &nextBytes)
        var nextExpected: [UInt8] = [0x84, 0, 0, 20]
        nextExpected += next.payload[0..<128]
        nextExpected += [0xC4]
        nextExpected += next.payload[128..<256]
        nextExpected += [0xC4]
        nextExpected += next.payload[256...]
        #expect(nextBytes == nextExpected)

        for piece in [bytes.count + nextBytes.count, 1, 3] {
            var decoder = ChunkStreamDecoder()
            let decoded = try decodeChunks(bytes + nextBytes, with: &decoder) { piece }
            #expect(
                decoded == [ChunkedMessage(message: message, chunkStream: 4), ChunkedMessage(message: next, chunkStream: 4)],
                "pieces of \(piece) bytes")
        }
    }

    @Test("Abort (type 2) discards the partial message on its chunk stream; the next message there decodes cleanly")
    func abortDiscardsThePartialMessage() throws {
        var encoder = ChunkStreamEncoder()
        var long: [UInt8] = []
        encoder.encode(
            RTMPMessage(type: .audio, streamID: 1, timestamp: 100, payload: testBytes(300, seed: 1)), chunkStream: 4,
            into: &long)
        let firstChunk = Array(long.prefix(12 + 128))
        let abort = RTMPMessage(type: .abort, payload: [0, 0, 0, 4])
        var abortBytes: [UInt8] = []
        encoder.encode(abort, chunkStream: 2, into: &abortBytes)
        #expect(abortBytes == [0x02, 0, 0, 0, 0, 0, 4, 2, 0, 0, 0, 0, 0, 0, 0, 4])
        let next = RTMPMessage(type: .audio, streamID: 1, timestamp: 200, payload: testBytes(10, seed: 2))
        var fresh = ChunkStreamEncoder()
        var nextBytes: [UInt8] = []
        fresh.encode(next, chunkStream: 4, into: &nextBytes)
        #expect(nextBytes[0] >> 6 == 0)

        for piece in [1, 7, 1000] {
            var decoder = ChunkStreamDecoder()
            let decoded = try decodeChunks(firstChunk + abortBytes + nextBytes, with: &decoder) { piece }
            #expect(
                decoded == [ChunkedMessage(message: abort, chunkStream: 2), ChunkedMessage(message: next, chunkStream: 4)],
                "pieces of \(piece) bytes")
        }
        // Without the Abort, the same fmt 0 header in the middle of the message is an error.
        expectDecodingFailure(firstChunk + nextBytes, "fmt 0 header in the middle")
    }
}

// MARK: - Malformed input

@Suite("RTMP chunk streams: malformed input is a typed error")
struct ChunkErrorTests {
    @Test("A chunk stream that starts with a fmt 3 header is a protocol error (fmt 1 and 2 are accepted: see ChunkQuirkTests)")
    func compressedHeaderFirst() {
        expectDecodingFailure([0xC3, 0xAA], "chunk stream 3 starts with a fmt 3 header")
        expectDecodingFailure([0xC0, 0x05, 0xAA], "chunk stream 69 starts with a fmt 3 header")
        // A known chunk stream does not make another one known.
        var encoder = ChunkStreamEncoder()
        var bytes: [UInt8] = []
        encoder.encode(RTMPMessage(type: .audio, payload: [1]), chunkStream: 3, into: &bytes)
        expectDecodingFailure(bytes + [0xC5, 0xAA], "chunk stream 5 starts with a fmt 3 header")
    }

    @Test("Set Chunk Size of 0, above 16 MiB (the longest message), or shorter than 4 bytes is a protocol error; 0xFFFFFF is accepted")
    func badSetChunkSize() throws {
        let header: [UInt8] = [0x02, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0]
        expectDecodingFailure(header + [0x80, 0, 0, 0], "chunk size of 2147483648")
        expectDecodingFailure(header + [0xFF, 0xFF, 0xFF, 0xFF], "chunk size of 4294967295")
        expectDecodingFailure(header + [0x7F, 0xFF, 0xFF, 0xFF], "chunk size of 2147483647")
        expectDecodingFailure(header + [0x01, 0, 0, 0], "chunk size of 16777216")
        expectDecodingFailure(header + [0, 0, 0, 0], "chunk size of 0")
        expectDecodingFailure([0x02, 0, 0, 0, 0, 0, 3, 1, 0, 0, 0, 0, 0, 0, 1], "Set Chunk Size message shorter than 4 bytes")
        var decoder = ChunkStreamDecoder()
        let decoded = try decodeChunks(header + [0, 0xFF, 0xFF, 0xFF], with: &decoder) { 16 }
        #expect(decoded.count == 1)
        #expect(decoder.chunkSize == 0xFF_FFFF)
    }

    @Test("An Abort shorter than 4 bytes is a protocol error")
    func shortAbort() {
        expectDecodingFailure([0x02, 0, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 0, 4], "Abort message shorter than 4 bytes")
    }

    @Test("A message longer than maximumMessageLength is a protocol error as soon as its header arrives")
    func messageTooLong() throws {
        var encoder = ChunkStreamEncoder()
        var fits: [UInt8] = []
        encoder.encode(RTMPMessage(type: .audio, payload: testBytes(100, seed: 1)), chunkStream: 4, into: &fits)
        var decoder = ChunkStreamDecoder()
        decoder.maximumMessageLength = 100
        let decoded = try decodeChunks(fits, with: &decoder) { 10 }
        #expect(decoded.map(\.message.payload.count) == [100])

        var fresh = ChunkStreamEncoder()
        var long: [UInt8] = []
        fresh.encode(RTMPMessage(type: .audio, payload: testBytes(101, seed: 2)), chunkStream: 4, into: &long)
        expectDecodingFailure(long, "101-byte message is longer than the 100 bytes allowed") { $0.maximumMessageLength = 100 }
        expectDecodingFailure(Array(long.prefix(12)), "101-byte message is longer") { $0.maximumMessageLength = 100 }
        // A later, longer message on a known chunk stream (fmt 1) is checked too.
        expectDecodingFailure(fits + Self.fmt1Header(length: 101), "101-byte message") {
            $0.maximumMessageLength = 100
        }
    }

    /// A fmt 1 header on chunk stream 4: delta 1, `length` bytes, audio.
    static func fmt1Header(length: Int) -> [UInt8] {
        [0x44, 0, 0, 1, UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF), 8]
    }

    @Test("More chunk streams than maximumChunkStreams is a protocol error; the known ones keep working")
    func tooManyChunkStreams() throws {
        var encoder = ChunkStreamEncoder()
        var bytes: [UInt8] = []
        for chunkStream: UInt32 in [3, 4, 5, 3] {
            encoder.encode(RTMPMessage(type: .audio, payload: [UInt8(chunkStream)]), chunkStream: chunkStream, into: &bytes)
        }
        var decoder = ChunkStreamDecoder()
        decoder.maximumChunkStreams = 3
        let decoded = try decodeChunks(bytes, with: &decoder) { 1 }
        #expect(decoded.map(\.chunkStream) == [3, 4, 5, 3])
        var withAFourth = bytes
        encoder.encode(RTMPMessage(type: .audio, payload: [6]), chunkStream: 6, into: &withAFourth)
        expectDecodingFailure(withAFourth, "more than 3 chunk streams") { $0.maximumChunkStreams = 3 }
    }

    @Test("A fmt 0, 1 or 2 header in the middle of a message on the same chunk stream is a protocol error")
    func headerInTheMiddleOfAMessage() throws {
        var encoder = ChunkStreamEncoder()
        var long: [UInt8] = []
        encoder.encode(
            RTMPMessage(type: .audio, streamID: 1, timestamp: 5, payload: testBytes(300, seed: 1)), chunkStream: 4,
            into: &long)
        let firstChunk = Array(long.prefix(12 + 128))
        expectDecodingFailure(firstChunk + [0x04, 0, 0, 9, 0, 0, 1, 8, 1, 0, 0, 0, 0xAA], "chunk stream 4 got a fmt 0 header in the middle")
        expectDecodingFailure(firstChunk + [0x44, 0, 0, 9, 0, 0, 1, 8, 0xAA], "chunk stream 4 got a fmt 1 header in the middle")
        expectDecodingFailure(firstChunk + [0x84, 0, 0, 9, 0xAA], "fmt 2 header in the middle of a 300-byte message")
        // A message on another chunk stream in between is fine.
        var other: [UInt8] = []
        encoder.encode(RTMPMessage(type: .video, streamID: 1, timestamp: 6, payload: [1, 2]), chunkStream: 6, into: &other)
        var decoder = ChunkStreamDecoder()
        let decoded = try decodeChunks(firstChunk + other + long.dropFirst(12 + 128), with: &decoder) { 1 }
        #expect(decoded.map(\.chunkStream) == [6, 4])
        #expect(decoded.last?.message.payload == testBytes(300, seed: 1))
    }
}

// MARK: - Fuzzing

@Suite("RTMP chunk streams and commands: fuzzing")
struct ChunkFuzzTests {
    /// Decodes `bytes` in random pieces: every message must be made of bytes that went in, and an error must be a
    /// protocol error. Returns the messages, or nil after an error.
    private static func fuzzDecode(_ bytes: [UInt8], using generator: inout SeededGenerator) -> [ChunkedMessage]? {
        var decoder = ChunkStreamDecoder()
        do throws(AudioError) {
            let decoded = try decodeChunks(bytes, with: &decoder) { Int.random(in: 1...64, using: &generator) }
            let payloadBytes = decoded.reduce(0) { $0 + $1.message.payload.count }
            // Each message took at least a 1-byte basic header and its payload from the input.
            #expect(payloadBytes + decoded.count <= bytes.count)
            #expect(decoder.bufferedByteCount <= bytes.count)
            return decoded
        } catch {
            #expect(error.code == .protocolError, "\(error)")
            return nil
        }
    }

    @Test("2000 damaged streams in random pieces: messages or a protocol error, never a crash or an endless loop")
    func damagedStreams() {
        let encoded = encodeTraffic(smallTraffic(), chunkSizes: [128, 64])
        var generator = SeededGenerator(seed: 0x5EED)
        var errors = 0
        var decodedSome = 0
        for _ in 0..<2000 {
            let damaged = mutate(encoded.bytes, using: &generator)
            guard let decoded = Self.fuzzDecode(damaged, using: &generator) else {
                errors += 1
                continue
            }
            if !decoded.isEmpty { decodedSome += 1 }
            if damaged == encoded.bytes { #expect(decoded == encoded.messages) }
        }
        // The damage is neither always harmless nor always fatal: both paths were exercised.
        #expect(errors > 0)
        #expect(decodedSome > 0)
    }

    @Test("2000 buffers of random bytes: messages or a protocol error, never a crash")
    func randomBytes() {
        var generator = SeededGenerator(seed: 42)
        var errors = 0
        for i in 0..<2000 {
            var noise = (0..<Int.random(in: 1...512, using: &generator)).map { _ in
                UInt8.random(in: 0...255, using: &generator)
            }
            // Half start with a fmt 0 header, so that decoding gets past the first byte.
            if i.isMultiple(of: 2) { noise[0] &= 0x3F }
            if Self.fuzzDecode(noise, using: &generator) == nil { errors += 1 }
        }
        #expect(errors > 0)
    }

    @Test("2000 damaged command payloads: RTMPCommand(payload:) reads a command or throws a protocol error")
    func damagedCommands() {
        let connect = RTMPCommand(
            "connect", transactionID: 1,
            object: .object([
                AMF0Property("app", .string("live")), AMF0Property("type", .string("nonprivate")),
                AMF0Property("flashVer", .string("FMLE/3.0 (compatible; LiveAudio)")),
                AMF0Property("tcUrl", .string("rtmp://h/live")), AMF0Property("audioCodecs", .number(0x0400)),
                AMF0Property("fpad", .boolean(false)),
            ]),
            arguments: [.ecmaArray([AMF0Property("n", .null)]), .strictArray([.number(1), .undefined])])
        let valid = connect.message().payload
        var generator = SeededGenerator(seed: 7)
        var parsed = 0
        var rejected = 0
        for _ in 0..<2000 {
            let damaged = mutate(valid, using: &generator)
            do throws(AudioError) {
                let command = try RTMPCommand(payload: damaged)
                parsed += 1
                // What was read encodes to a payload that reads back the same.
                let payload = command.message().payload
                let again = try? RTMPCommand(payload: payload)
                #expect(again?.message().payload == payload)
            } catch {
                rejected += 1
                #expect(error.code == .protocolError, "\(error)")
            }
        }
        #expect(parsed > 0)
        #expect(rejected > 0)
    }
}

// MARK: - Commands, protocol control, handshake

@Suite("RTMP commands")
struct RTMPCommandTests {
    @Test("connect round-trips through message(streamID:), the chunk stream and init(payload:)")
    func connectRoundTrip() throws {
        let connect = RTMPCommand(
            "connect", transactionID: 1,
            object: .object([AMF0Property("app", .string("live")), AMF0Property("tcUrl", .string("rtmp://h/live"))]))
        let message = connect.message(streamID: 0)
        #expect(message.type == .commandAMF0)
        #expect(message.streamID == 0 && message.timestamp == 0)
        #expect(Array(message.payload.prefix(10)) == [0x02, 0, 7] + Array("connect".utf8))
        let decoded = try RTMPCommand(payload: message.payload)
        #expect(decoded == connect)
        #expect(decoded.object["app"]?.stringValue == "live")
        #expect(decoded.object["tcUrl"]?.stringValue == "rtmp://h/live")
        #expect(decoded.arguments.isEmpty)

        // Through the chunk stream as well.
        var encoder = ChunkStreamEncoder()
        var bytes: [UInt8] = []
        encoder.encode(message, chunkStream: ChunkStreamID.command, into: &bytes)
        var decoder = ChunkStreamDecoder()
        let received = try decodeChunks(bytes, with: &decoder) { 1 }
        #expect(received.count == 1)
        let first = try #require(received.first)
        #expect(first.chunkStream == 3)
        #expect(try RTMPCommand(payload: first.message.payload) == connect)

        let publish = RTMPCommand("publish", transactionID: 5, arguments: [.string("key"), .string("live")])
        let publishMessage = publish.message(streamID: 1)
        #expect(publishMessage.streamID == 1)
        let decodedPublish = try RTMPCommand(payload: publishMessage.payload)
        #expect(decodedPublish == publish)
        #expect(decodedPublish.object == .null)
        #expect(decodedPublish.arguments == [.string("key"), .string("live")])
    }

    @Test("_result's info object gives statusText \"description (code)\"")
    func resultStatusText() throws {
        let info = AMF0Value.object([
            AMF0Property("level", .string("status")), AMF0Property("code", .string("NetConnection.Connect.Success")),
            AMF0Property("description", .string("Connection succeeded.")),
        ])
        let result = RTMPCommand(
            "_result", transactionID: 1, object: .object([AMF0Property("fmsVer", .string("FMS/3,0,1,123"))]),
            arguments: [info])
        let decoded = try RTMPCommand(payload: result.message().payload)
        #expect(decoded.name == "_result")
        #expect(decoded.transactionID == 1)
        #expect(decoded.info == info)
        #expect(decoded.info?["level"]?.stringValue == "status")
        #expect(decoded.statusText == "Connection succeeded. (NetConnection.Connect.Success)")

        // Without a description the code alone; without an info object, a placeholder.
        let codeOnly = RTMPCommand(
            "onStatus", transactionID: 0, arguments: [.object([AMF0Property("code", .string("NetStream.Publish.Start"))])])
        #expect(try RTMPCommand(payload: codeOnly.message().payload).statusText == "NetStream.Publish.Start")
        #expect(RTMPCommand("_error", transactionID: 2).statusText == "no description")
    }

    @Test("A payload that is not AMF0, or lacks a name or a transaction id, is a protocol error")
    func badPayloads() {
        expectProtocolError("not valid AMF0") { _ = try RTMPCommand(payload: [0x42]) }
        expectProtocolError("not valid AMF0") { _ = try RTMPCommand(payload: [0x02, 0, 9, 0x61]) }
        expectProtocolError("without a name and a transaction id") { _ = try RTMPCommand(payload: []) }
        expectProtocolError("without a name and a transaction id") {
            _ = try RTMPCommand(payload: AMF0.encode([.string("connect")]))
        }
        expectProtocolError("without a name and a transaction id") {
            _ = try RTMPCommand(payload: AMF0.encode([.number(1), .string("connect")]))
        }
        expectProtocolError("without a name and a transaction id") {
            _ = try RTMPCommand(payload: AMF0.encode([.string("connect"), .string("1")]))
        }
    }
}

@Suite("RTMP protocol control")
struct ProtocolControlTests {
    @Test("A ping request for 1234 is User Control event 6 with the value big-endian: 0 6 0 0 4 210")
    func pingRequest() throws {
        let ping = ProtocolControl.userControl(.pingRequest, 1234)
        #expect(ping.type == .userControl)
        #expect(ping.streamID == 0)
        #expect(ping.payload == [0, 6, 0, 0, 4, 210])
        let parsed = try ProtocolControl.parseUserControl(ping.payload)
        #expect(parsed.event == 6)
        #expect(parsed.value == 1234)
        #expect(parsed.event == ProtocolControl.UserControlEvent.pingRequest.rawValue)
    }

    @Test("A User Control payload shorter than 6 bytes, and a 4-byte-number message shorter than 4, are protocol errors")
    func shortPayloads() {
        expectProtocolError("User Control message shorter than 6 bytes") {
            _ = try ProtocolControl.parseUserControl([0, 6, 0, 0, 4])
        }
        expectProtocolError("Acknowledgement message shorter than 4 bytes") {
            _ = try ProtocolControl.parseUInt32(RTMPMessage(type: .acknowledgement, payload: [0, 0, 1]))
        }
    }

    @Test("Set Chunk Size, Acknowledgement and Window Acknowledgement Size carry a big-endian number parseUInt32 reads")
    func numbers() throws {
        #expect(ProtocolControl.setChunkSize(4096).type == .setChunkSize)
        #expect(ProtocolControl.setChunkSize(4096).payload == [0, 0, 0x10, 0])
        #expect(try ProtocolControl.parseUInt32(ProtocolControl.windowAcknowledgementSize(2_500_000)) == 2_500_000)
        let ack = ProtocolControl.acknowledgement(sequenceNumber: 0xDEAD_BEEF)
        #expect(ack.type == .acknowledgement)
        #expect(ack.payload == [0xDE, 0xAD, 0xBE, 0xEF])
        #expect(try ProtocolControl.parseUInt32(ack) == 0xDEAD_BEEF)
    }
}

@Suite("RTMP handshake")
struct RTMPHandshakeTests {
    /// An S1: any 1536 bytes.
    static let s1: [UInt8] = (0..<RTMPHandshake.packetSize).map { UInt8(truncatingIfNeeded: $0 &* 5 &+ 1) }

    /// S0 + S1 + S2, S2 echoing `handshake`'s C1.
    static func response(to handshake: RTMPHandshake, s0: UInt8 = 3) -> [UInt8] {
        [s0] + s1 + Array(handshake.c0c1[1...])
    }

    @Test("C0+C1 is 1537 bytes: version 3, the time, four zero bytes, then random bytes")
    func c0c1() {
        let handshake = RTMPHandshake()
        #expect(handshake.c0c1.count == 1537)
        #expect(handshake.c0c1[0] == 3)
        #expect(Array(handshake.c0c1[5...8]) == [0, 0, 0, 0])
        #expect(Array(RTMPHandshake(time: 0x0102_0304).c0c1[1...4]) == [1, 2, 3, 4])
        #expect(Array(RTMPHandshake().c0c1[9...]) != Array(handshake.c0c1[9...]))
    }

    @Test("c2(answering:) accepts S0 = 3 and any S1, and returns S1 as C2; echoes(s2:) is true for an S2 echoing C1")
    func validResponse() throws {
        let handshake = RTMPHandshake(time: 77)
        let response = Self.response(to: handshake)
        #expect(response.count == RTMPHandshake.responseSize)
        #expect(RTMPHandshake.s0s1Size == 1537 && RTMPHandshake.s2Size == 1536)
        #expect(try handshake.c2(answering: response[...]) == Self.s1)
        // S0+S1 alone is enough for C2 (a server may send S2 only once it has C2).
        #expect(try handshake.c2(answering: response[..<1537]) == Self.s1)
        #expect(handshake.echoes(s2: response[1537...]))
        // S2's two times (its first 8 bytes) may be anything; bytes after S2 are the caller's.
        var later = response
        later.replaceSubrange(1537..<1545, with: [9, 9, 9, 9, 8, 8, 8, 8])
        later += [0x02, 0x00]
        #expect(try handshake.c2(answering: later[...]) == Self.s1)
        #expect(handshake.echoes(s2: later[1537...]))
        // A slice that does not start at index 0.
        let shifted: [UInt8] = [0xEE, 0xEE] + response
        #expect(try handshake.c2(answering: shifted[2...]) == Self.s1)
        #expect(handshake.echoes(s2: shifted[(2 + 1537)...]))
    }

    @Test("A wrong S0 is a protocol error saying what answered: another version, TLS (use rtmps) or HTTP")
    func wrongVersion() {
        let handshake = RTMPHandshake()
        let cases: [(UInt8, String)] = [(6, "version 6"), (0x16, "rtmps"), (UInt8(ascii: "H"), "HTTP")]
        for (s0, fragment) in cases {
            let response = Self.response(to: handshake, s0: s0)
            expectProtocolError(fragment) { _ = try handshake.c2(answering: response[...]) }
        }
    }

    @Test("An S2 whose random part differs from C1, byte by byte, is told apart (and is no error: the publisher goes on)")
    func s2Mismatch() throws {
        let handshake = RTMPHandshake()
        for index in [1 + 1536 + 8, 1 + 1536 + 100, RTMPHandshake.responseSize - 1] {
            var response = Self.response(to: handshake)
            response[index] ^= 0xFF
            #expect(try handshake.c2(answering: response[...]) == Self.s1)
            #expect(!handshake.echoes(s2: response[1537...]), "byte \(index)")
        }
        // An S2 of the server's own random bytes.
        var generator = SeededGenerator(seed: 5)
        let own = (0..<1536).map { _ in UInt8.random(in: 0...255, using: &generator) }
        #expect(!handshake.echoes(s2: own[...]))
    }

}

/// A Set Chunk Size message for a size outside the spec's 1 … 0x7FFFFFFF announces the nearest size in it, instead
/// of trapping on the conversion to 32 bits.
@Test(arguments: [(-5, 1), (0, 1), (1, 1), (4096, 4096), (0x7FFF_FFFF, 0x7FFF_FFFF), (Int.max, 0x7FFF_FFFF)] as [(Int, UInt32)])
func setChunkSizeIsClampedToTheSpecsRange(size: Int, announced: UInt32) throws {
    let message = ProtocolControl.setChunkSize(size)
    #expect(message.type == .setChunkSize)
    #expect(try ProtocolControl.parseUInt32(message) == announced)
}
