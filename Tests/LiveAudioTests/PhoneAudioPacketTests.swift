import Foundation
import LiveAudio
import LiveAudioStage
import Testing

/// A phone's audio message: written and read back field for field, its layout byte for byte as documented, and every
/// field out of its range refused with a message naming it.
@Suite struct PhoneAudioPacketTests {
    static func pcm(frames: Int, channels: Int) -> [UInt8] {
        (0..<(frames * channels)).flatMap { i -> [UInt8] in
            let v = Int16(truncatingIfNeeded: i * 37 - 20_000)
            return [UInt8(truncatingIfNeeded: v), UInt8(truncatingIfNeeded: v >> 8)]
        }
    }

    @Test func aMessageReadsBackAsWritten() throws {
        let packet = PhoneAudioPacket(
            codec: .pcm16, sequence: 0xFFFF_FFFE, captureMicroseconds: -1_234_567, sampleRate: 44_100, channelCount: 2, isFirst: true,
            frameCount: 441, payload: Self.pcm(frames: 441, channels: 2))
        let bytes = packet.encoded()
        #expect(bytes.count == 24 + 441 * 4)
        // The documented layout: "LA", version 1, codec 0, sequence, time, rate, channels, flags, frames.
        #expect(Array(bytes[0..<4]) == [0x4C, 0x41, 1, 0])
        #expect(Array(bytes[4..<8]) == [0xFE, 0xFF, 0xFF, 0xFF])
        #expect(Array(bytes[8..<16]) == withUnsafeBytes(of: Int64(-1_234_567).littleEndian) { Array($0) })
        #expect(Array(bytes[16..<20]) == [0x44, 0xAC, 0, 0] && bytes[20] == 2 && bytes[21] == 1 && Array(bytes[22..<24]) == [0xB9, 0x01])
        let read = try PhoneAudioPacket(decoding: bytes)
        #expect(read == packet)
        let samples = read.pcmSamples()
        #expect(samples.count == 882 && samples[0] == Float(-20_000) / 32_768 && samples[1] == Float(-19_963) / 32_768)
        let opus = PhoneAudioPacket(codec: .opus, sequence: 1, captureMicroseconds: 0, sampleRate: 48_000, channelCount: 1, frameCount: 960, payload: [0xF8, 1, 2])
        #expect(try PhoneAudioPacket(decoding: opus.encoded()) == opus && opus.pcmSamples().isEmpty)
    }

    /// Each field out of range, and payloads that do not fit: refused, the message naming what.
    @Test func everyBadFieldIsRefusedByName() {
        let good = PhoneAudioPacket(
            codec: .pcm16, sequence: 1, captureMicroseconds: 0, sampleRate: 48_000, channelCount: 1, frameCount: 4, payload: Self.pcm(frames: 4, channels: 1)
        ).encoded()
        func changed(_ at: Int, _ value: UInt8) -> [UInt8] {
            var b = good
            b[at] = value
            return b
        }
        let cases: [([UInt8], String)] = [
            (Array(good.prefix(23)), "the header alone"),
            (changed(0, 0x4D), "starts with LA"),
            (changed(2, 2), "version 2"),
            (changed(3, 7), "codec 7"),
            (changed(17, 0x01), "at 384 Hz"),  // 48000 is 0x0000BB80: its second byte 0x01 makes 0x0180
            (changed(20, 3), "3 channels"),
            (changed(21, 2), "flags 2"),
            (changed(22, 0), "0 frames"),
            (changed(22, 5), "has 8 bytes, not 10"),
            (good + [0, 0], "has 10 bytes, not 8"),
            ([UInt8](repeating: 0, count: PhoneAudioPacket.maximumBytes + 1), "at most"),
            (PhoneAudioPacket(codec: .opus, sequence: 0, captureMicroseconds: 0, sampleRate: 16_000, channelCount: 1, frameCount: 320, payload: [1]).encoded(), "Opus at 48000"),
            (PhoneAudioPacket(codec: .opus, sequence: 0, captureMicroseconds: 0, sampleRate: 48_000, channelCount: 1, frameCount: 960, payload: []).encoded(), "an Opus packet of 0 bytes"),
            (PhoneAudioPacket(codec: .opus, sequence: 0, captureMicroseconds: 0, sampleRate: 48_000, channelCount: 1, frameCount: 960, payload: [UInt8](repeating: 1, count: 1501)).encoded(), "1 … 1500"),
        ]
        for (bytes, words) in cases {
            do {
                _ = try PhoneAudioPacket(decoding: bytes)
                Issue.record("taken: \(words)")
            } catch {
                #expect(error.code == .invalidFormat && error.message.contains(words), "\(words): \(error.message)")
            }
        }
    }
}
