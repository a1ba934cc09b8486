import Foundation
import LiveAudio
import Testing
import TestSupport

/// Decodes everything `bytes` holds, fed `piece` bytes at a time.
private func decodeAll(_ bytes: [UInt8], piece: Int = .max) throws -> [(RTMPMessage, UInt32)] {
    var decoder = ChunkStreamDecoder()
    var out: [(RTMPMessage, UInt32)] = []
    var i = 0
    while i < bytes.count {
        let n = min(piece, bytes.count - i)
        decoder.append(bytes[i..<i + n])
        i += n
        while let m = try decoder.nextMessage() { out.append((m.message, m.chunkStream)) }
    }
    return out
}

private func uint24(_ v: Int) -> [UInt8] { [UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }

@Suite("RTMP chunk streams: what servers in the field send")
struct ChunkQuirkTests {
    @Test("A chunk stream may start with a fmt 1 header (pyrtmp): message stream 0, the delta as the time — byte by byte too")
    func fmt1First() throws {
        // fmt 1, csid 3: delta 5, length 3, type 20; then fmt 3 continues nothing (3 bytes fit one chunk).
        let bytes: [UInt8] = [0x43] + uint24(5) + uint24(3) + [20, 0xA1, 0xA2, 0xA3]
            // A second message on the same chunk stream, fmt 2: delta 7, same length and type.
            + [0x83] + uint24(7) + [0xB1, 0xB2, 0xB3]
        for piece in [1, 2, 5, .max] {
            let messages = try decodeAll(bytes, piece: piece)
            try #require(messages.count == 2, "fed \(piece) at a time")
            #expect(messages[0].0 == RTMPMessage(type: .commandAMF0, streamID: 0, timestamp: 5, payload: [0xA1, 0xA2, 0xA3]))
            #expect(messages[0].1 == 3)
            #expect(messages[1].0 == RTMPMessage(type: .commandAMF0, streamID: 0, timestamp: 12, payload: [0xB1, 0xB2, 0xB3]))
        }
        // A long first message under a fmt 1 header continues with fmt 3 chunks at the chunk size.
        let long = (0..<300).map { UInt8(truncatingIfNeeded: $0) }
        var chunked: [UInt8] = [0x44] + uint24(0) + uint24(300) + [8] + Array(long[0..<128])
        chunked += [0xC4] + Array(long[128..<256]) + [0xC4] + Array(long[256...])
        let messages = try decodeAll(chunked, piece: 7)
        #expect(messages.map(\.0) == [RTMPMessage(type: .audio, streamID: 0, timestamp: 0, payload: long)])
    }

    @Test("A chunk stream may start with a fmt 2 header: length and type taken as zero, an empty message of type 0")
    func fmt2First() throws {
        let bytes: [UInt8] = [0x87] + uint24(9) + [0x02] + uint24(0) + uint24(4) + [1, 0, 0, 0, 0] + [0, 0, 1, 0]
        for piece in [1, 3, .max] {
            let messages = try decodeAll(bytes, piece: piece)
            try #require(messages.count == 2, "fed \(piece) at a time")
            #expect(messages[0].0 == RTMPMessage(type: RTMPMessageType(rawValue: 0), streamID: 0, timestamp: 9, payload: []))
            #expect(messages[0].1 == 7)
            // What follows is read as usual: a Set Chunk Size of 256.
            #expect(messages[1].0.type == .setChunkSize)
        }
    }

    @Test("Set Chunk Size in the middle of another chunk stream's message: its remaining chunks use the new size, several times over")
    func setChunkSizeAnywhere() throws {
        let payload = (0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        func setChunkSize(_ n: Int) -> [UInt8] { [0x02] + uint24(0) + uint24(4) + [1, 0, 0, 0, 0] + ProtocolControlBytes.uint32(n) }
        // 128 bytes at 128, then 60 bytes at 60 (three times), then the size drops to 1 for 5 bytes, then 4096.
        var bytes: [UInt8] = [0x03] + uint24(0) + uint24(1000) + [20, 0, 0, 0, 0] + Array(payload[0..<128])
        bytes += setChunkSize(60)
        var offset = 128
        for _ in 0..<3 {
            bytes += [0xC3] + Array(payload[offset..<offset + 60])
            offset += 60
        }
        bytes += setChunkSize(1)
        for _ in 0..<5 {
            bytes += [0xC3, payload[offset]]
            offset += 1
        }
        // At a chunk size of 1, the next Set Chunk Size comes a byte per chunk too.
        let last = setChunkSize(4096)
        bytes += Array(last[0..<13]) + [0xC2, last[13], 0xC2, last[14], 0xC2, last[15]]
        bytes += [0xC3] + Array(payload[offset...])
        for piece in [1, 13, .max] {
            let messages = try decodeAll(bytes, piece: piece)
            #expect(messages.map(\.0.type) == [.setChunkSize, .setChunkSize, .setChunkSize, .commandAMF0], "fed \(piece) at a time")
            #expect(messages.last?.0.payload == payload)
        }
        // Absurd sizes are still refused, wherever they come.
        let absurd = Array(bytes[0..<(12 + 128)]) + setChunkSize(0x7FFF_FFFF)
        #expect(throws: AudioError.self) { _ = try decodeAll(absurd) }
    }
}

/// Big-endian 4-byte numbers for hand-built messages.
enum ProtocolControlBytes {
    static func uint32(_ v: Int) -> [UInt8] { [UInt8(v >> 24 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }
}

@Suite("RTMP commands: read leniently, as established clients read them")
struct CommandQuirkTests {
    func command(_ values: [AMF0Value], type: RTMPMessageType = .commandAMF0) throws -> RTMPCommand? {
        try RTMPCommand(message: RTMPMessage(type: type, payload: AMF0.encode(values)))
    }

    @Test("onFCPublish with its name alone (FFmpeg's server), and commands without a transaction id, read as transaction 0")
    func nameOnly() throws {
        let c = try #require(try command([.string("onFCPublish")]))
        #expect(c.name == "onFCPublish" && c.transactionID == 0 && c.object == .null && c.arguments.isEmpty)
        let bw = try #require(try command([.string("onBWDone"), .null, .number(8192)]))
        #expect(bw.transactionID == 0 && bw.object == .number(8192))
    }

    @Test("Missing and extra arguments, _error with and without a description object, onStatus with its info where the command object goes")
    func shapes() throws {
        let missing = try #require(try command([.string("_result"), .number(4)]))
        #expect(missing.transactionID == 4 && missing.object == .null && missing.resultNumber == nil)
        let noNull = try #require(try command([.string("_result"), .number(4), .number(1)]))
        #expect(noNull.resultNumber == 1, "createStream's _result without the null command object")
        let usual = try #require(try command([.string("_result"), .number(4), .null, .number(7), .string("extra")]))
        #expect(usual.resultNumber == 7)
        let bare = try #require(try command([.string("_error"), .number(2), .null]))
        #expect(bare.info == nil && bare.statusText == "no description")
        let described = try #require(
            try command([
                .string("_error"), .number(3), .null,
                .object([AMF0Property("level", .string("error")), AMF0Property("code", .string("NetConnection.Call.Failed")),
                         AMF0Property("description", .string("Method not found"))]),
            ]))
        #expect(described.statusText == "Method not found (NetConnection.Call.Failed)")
        let inObject = try #require(
            try command([
                .string("onStatus"), .number(0),
                .object([AMF0Property("level", .string("status")), AMF0Property("code", .string("NetStream.Publish.Start"))]),
                .string("extra"), .number(42),
            ]))
        #expect(inObject.info?["code"]?.stringValue == "NetStream.Publish.Start")
        // A _result's command object is the server's properties, never its status.
        let connect = try #require(
            try command([.string("_result"), .number(1), .object([AMF0Property("fmsVer", .string("FMS/3"))])]))
        #expect(connect.info == nil)
    }

    @Test("Not a command, or no name first: nil; a damaged reply: a protocol error; a damaged other command: nil")
    func damage() throws {
        #expect(try RTMPCommand(message: RTMPMessage(type: .audio, payload: [0xAF, 1])) == nil)
        #expect(try command([.number(1), .string("x")]) == nil)
        #expect(try RTMPCommand(message: RTMPMessage(type: .commandAMF0, payload: [])) == nil)
        #expect(try RTMPCommand(message: RTMPMessage(type: .commandAMF0, payload: [0xFF])) == nil)
        for name in ["_result", "_error", "onStatus"] {
            let truncated = Array(AMF0.encode([.string(name), .number(1), .null, .object([AMF0Property("code", .string("x"))])]).dropLast(2))
            #expect(throws: AudioError.self, "\(name)") {
                _ = try RTMPCommand(message: RTMPMessage(type: .commandAMF0, payload: truncated))
            }
        }
        let deep = AMF0.encode([.string("_result"), .number(1)]) + (0..<10_000).flatMap { _ in [0x0A, 0, 0, 0, 1] as [UInt8] }
        let error = try #require(throws: AudioError.self) { _ = try RTMPCommand(message: RTMPMessage(type: .commandAMF0, payload: deep)) }
        #expect(error.code == .protocolError && error.message.contains("nested"))
        let other = Array(AMF0.encode([.string("onBWDone"), .number(0), .null, .string("abc")]).dropLast(1))
        #expect(try RTMPCommand(message: RTMPMessage(type: .commandAMF0, payload: other)) == nil)
    }

    @Test("AMF3 command messages (type 17): a format byte, then AMF0 switching to AMF3 objects; or AMF3 throughout")
    func amf3Commands() throws {
        // _result(1, {fmsVer}, AMF3 {level, code, objectEncoding: 3}) as Wowza-style servers send it.
        var payload: [UInt8] = [0x00] + AMF0.encode([.string("_result"), .number(1), .object([AMF0Property("fmsVer", .string("FMS/3"))])])
        // 0x11 switch; object, traits inline dynamic (0x0B), class "" (0x01); members; "" ends.
        payload += [0x11, 0x0A, 0x0B, 0x01]
        payload += [0x0B] + Array("level".utf8) + [0x06, 0x0D] + Array("status".utf8)
        payload += [0x09] + Array("code".utf8) + [0x06, 0x3B] + Array("NetConnection.Connect.Success".utf8)
        payload += [0x1D] + Array("objectEncoding".utf8) + [0x04, 0x03]
        payload += [0x01]
        let c = try #require(try RTMPCommand(message: RTMPMessage(type: .commandAMF3, payload: payload)))
        #expect(c.name == "_result" && c.transactionID == 1)
        #expect(c.info?["code"]?.stringValue == "NetConnection.Connect.Success")
        #expect(c.info?["objectEncoding"]?.numberValue == 3)
        // AMF3 throughout: onBWDone(0, null, 8192).
        let pure: [UInt8] = [0x00, 0x06, 0x11] + Array("onBWDone".utf8) + [0x04, 0x00, 0x01, 0x04, 0xC0, 0x00]
        let bw = try #require(try RTMPCommand(message: RTMPMessage(type: .commandAMF3, payload: pure)))
        #expect(bw.name == "onBWDone" && bw.transactionID == 0 && bw.object == .null && bw.arguments == [.number(8192)])
        // AMF3 data (type 15): a format byte, then AMF0.
        let data = RTMPMessage(type: .dataAMF3, payload: [0x00] + AMF0.encode([.string("|RtmpSampleAccess"), .boolean(true)]))
        #expect(RTMPCommand.values(in: data).values == [.string("|RtmpSampleAccess"), .boolean(true)])
        #expect(try RTMPCommand(message: data) == nil, "data is not a command")
    }
}

@Suite("AMF3 and AMF0's complex markers, read into AMF0Value")
struct AMF3Tests {
    func read(_ bytes: [UInt8]) throws -> AMF0Value {
        var r = AMF3Reader(bytes)
        let v = try r.value()
        #expect(r.atEnd, "\(bytes.count - r.offset) bytes left")
        return v
    }

    @Test("U29 integers of 1 to 4 bytes, sign-extended from 29 bits (AMF3 spec §1.3.1)")
    func integers() throws {
        let cases: [([UInt8], Double)] = [
            ([0x00], 0), ([0x7F], 127), ([0x81, 0x00], 128), ([0xFF, 0x7F], 0x3FFF), ([0x81, 0x80, 0x00], 0x4000),
            ([0xFF, 0xFF, 0x7F], 0x1F_FFFF), ([0x80, 0xC0, 0x80, 0x00], 0x20_0000), ([0xBF, 0xFF, 0xFF, 0xFF], 0x0FFF_FFFF),
            ([0xFF, 0xFF, 0xFF, 0xFF], -1), ([0xC0, 0x80, 0x80, 0x00], -0x1000_0000),
        ]
        for (bytes, value) in cases { #expect(try read([0x04] + bytes) == .number(value), "\(bytes)") }
        #expect(try read([0x05, 0x40, 0x09, 0x21, 0xFB, 0x54, 0x44, 0x2D, 0x18]) == .number(3.141592653589793))
        #expect(try read([0x00]) == .undefined)
        #expect(try read([0x01]) == .null)
        #expect(try read([0x02]) == .boolean(false))
        #expect(try read([0x03]) == .boolean(true))
    }

    @Test("Strings and their references; the empty string is never referenced")
    func strings() throws {
        // An array of "ab", "", "ab" (by reference 0), "cd", "cd" (reference 1).
        let bytes: [UInt8] = [0x09, 0x0B, 0x01, 0x06, 0x05, 0x61, 0x62, 0x06, 0x01, 0x06, 0x00, 0x06, 0x05, 0x63, 0x64, 0x06, 0x02]
        #expect(try read(bytes) == .strictArray([.string("ab"), .string(""), .string("ab"), .string("cd"), .string("cd")]))
        #expect(throws: AudioError.self) { _ = try read([0x06, 0x02]) }  // a reference to a string never read
    }

    @Test("Objects: sealed and dynamic members, traits by reference, the object table by reference")
    func objects() throws {
        // [ {a: 1 (sealed), b: 2 (dynamic)}, an object of the same traits {a: 3}, a reference to the first ]
        let bytes: [UInt8] = [
            0x09, 0x07, 0x01,
            0x0A, 0x1B, 0x03, 0x50, 0x03, 0x61, 0x04, 0x01, 0x03, 0x62, 0x04, 0x02, 0x01,  // traits: dynamic, 1 sealed, class "P"
            0x0A, 0x01, 0x04, 0x03, 0x01,  // traits reference 0: a = 3, no dynamic members
            0x0A, 0x02,  // object reference 1 (0 is the array itself)
        ]
        let first = AMF0Value.object([AMF0Property("a", .number(1)), AMF0Property("b", .number(2))])
        #expect(try read(bytes) == .strictArray([first, .object([AMF0Property("a", .number(3))]), first]))
        // Externalizable objects only their class can read.
        let external: [UInt8] = [0x0A, 0x07, 0x07] + Array("Ext".utf8)
        let error = try #require(throws: AudioError.self) { _ = try read(external) }
        #expect(error.message.contains("externalizable"))
    }

    @Test("Arrays with a named part, dates, XML, byte arrays, vectors and dictionaries")
    func others() throws {
        // {k: "v"} + dense [true]
        #expect(
            try read([0x09, 0x03, 0x03, 0x6B, 0x06, 0x03, 0x76, 0x01, 0x03])
                == .ecmaArray([AMF0Property("k", .string("v")), AMF0Property("0", .boolean(true))]))
        #expect(try read([0x08, 0x01, 0x42, 0x76, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00]) == .date(milliseconds: Double(bitPattern: 0x4276_0000_0000_0000), timeZone: 0))
        #expect(try read([0x0B, 0x07, 0x3C, 0x61, 0x2F]) == .string("<a/"))
        #expect(try read([0x0C, 0x05, 0x01, 0xFF]) == .strictArray([.number(1), .number(255)]))
        #expect(try read([0x0D, 0x05, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x02]) == .strictArray([.number(-1), .number(2)]))
        #expect(try read([0x0E, 0x03, 0x01, 0xFF, 0xFF, 0xFF, 0xFF]) == .strictArray([.number(4_294_967_295)]))
        #expect(try read([0x0F, 0x03, 0x00, 0x3F, 0xF0, 0, 0, 0, 0, 0, 0]) == .strictArray([.number(1)]))
        #expect(try read([0x10, 0x03, 0x00, 0x01, 0x04, 0x05]) == .strictArray([.number(5)]))
        #expect(try read([0x11, 0x03, 0x00, 0x04, 0x07, 0x06, 0x03, 0x78]) == .ecmaArray([AMF0Property("7", .string("x"))]))
    }

    @Test("Malformed AMF3 is an error, never a crash: truncation, bad references, counts past the end, depth, reference bombs")
    func malformed() throws {
        for bytes: [UInt8] in [[0x04, 0x80], [0x05, 0x00], [0x06, 0x07, 0x61], [0x0A, 0x04], [0x09, 0xFF, 0xFF, 0xFF, 0x7F], [0x12],
                               [0x0D, 0xFF, 0xFF, 0x7F, 0x00], [0x0A, 0x0B, 0x01, 0x03]] {
            #expect(throws: AudioError.self, "\(bytes)") { _ = try read(bytes) }
        }
        // Arrays nested 100 deep.
        let deep = (0..<100).flatMap { _ in [0x09, 0x03, 0x01] as [UInt8] }
        #expect(throws: AudioError.self) { _ = try read(deep) }
        // Each array refers twice to the one before: 40 levels stand for 2^40 values in 240 bytes.
        var bomb: [UInt8] = [0x09, 0x01, 0x01]  // array 0: empty
        for level in 1...40 {
            bomb += [0x09, 0x05, 0x01, 0x09, UInt8((level - 1) << 1), 0x09, UInt8((level - 1) << 1)]
        }
        var reader = AMF3Reader(Array(bomb))
        let error = try #require(throws: AudioError.self) { while !reader.atEnd { _ = try reader.value() } }
        #expect(error.message.contains("expand"))
    }

    @Test("AMF0: the AMF3 switch (0x11), typed objects, references, XML documents, unsupported")
    func amf0Markers() throws {
        let typed: [UInt8] = [0x10, 0x00, 0x01, 0x43, 0x00, 0x01, 0x61, 0x05, 0x00, 0x00, 0x09]
        let object: [UInt8] = [0x03, 0x00, 0x01, 0x62, 0x01, 0x01, 0x00, 0x00, 0x09]
        let values = try AMF0.decodeAll(
            typed + object + [0x07, 0x00, 0x01] + [0x0F, 0, 0, 0, 2, 0x3C, 0x78] + [0x0D] + [0x11, 0x04, 0x05])
        #expect(
            values == [
                .object([AMF0Property("a", .null)]), .object([AMF0Property("b", .boolean(true))]),
                .object([AMF0Property("b", .boolean(true))]), .string("<x"), .undefined, .number(5),
            ])
        #expect(throws: AudioError.self) { _ = try AMF0.decodeAll([0x07, 0x00, 0x00]) }  // nothing to refer to
        #expect(throws: AudioError.self) { _ = try AMF0.decodeAll([0x04]) }  // movie clip: reserved
        // AMF0 references bounded like AMF3's: strict arrays that each hold the one before twice.
        var bomb: [UInt8] = [0x0A, 0, 0, 0, 0]
        for level in 1...40 { bomb += [0x0A, 0, 0, 0, 2, 0x07, 0x00, UInt8(level - 1), 0x07, 0x00, UInt8(level - 1)] }
        let error = try #require(throws: AudioError.self) { _ = try AMF0.decodeAll(bomb) }
        #expect(error.message.contains("expand"))
    }
}
