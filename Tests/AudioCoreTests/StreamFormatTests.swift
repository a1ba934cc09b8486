import AudioCore
import Testing

@Suite struct StreamFormatTests {
    @Test func derivedSizes() throws {
        let s16 = try StreamFormat(sampleRate: 44_100, channelCount: 2, sampleType: .int16, interleaved: true)
        #expect(s16.bytesPerFrame == 4 && s16.bytesPerPacket == 4 && s16.framesPerPacket == 1 && s16.bufferCount == 1)
        let f32 = try StreamFormat(sampleRate: 48_000, channelCount: 2, sampleType: .float32, interleaved: false)
        #expect(f32.bytesPerFrame == 4 && f32.bufferCount == 2)
        let s24 = try StreamFormat(sampleRate: 96_000, channelCount: 6, sampleType: .int24, interleaved: true)
        #expect(s24.bytesPerFrame == 18)
        let s32 = try StreamFormat(sampleRate: 8_000, channelCount: 1, sampleType: .int32, interleaved: true)
        #expect(s32.bytesPerFrame == 4)
    }

    @Test func seedFormats() {
        let capture = StreamFormat.capture48kMonoInt16
        #expect(capture.sampleRate == 48_000 && capture.channelCount == 1 && capture.sampleType == .int16)
        #expect(capture.isInterleaved && capture.bytesPerFrame == 2)
        let cd = StreamFormat.stereo44kInt16
        #expect(cd.sampleRate == 44_100 && cd.channelCount == 2 && cd.bytesPerFrame == 4 && cd.isInterleaved)
    }

    @Test(arguments: [
        (0.0, 2, "sampleRate"), (-44_100, 2, "sampleRate"), (.nan, 2, "sampleRate"), (.infinity, 2, "sampleRate"),
        (500, 2, "sampleRate"), (1_000_000, 2, "sampleRate"), (48_000, 0, "channelCount"), (48_000, -1, "channelCount"),
        (48_000, 65, "channelCount"),
    ])
    func rejectsInvalidFields(rate: Double, channels: Int, field: String) {
        #expect {
            try StreamFormat(sampleRate: rate, channelCount: channels, sampleType: .int16, interleaved: true)
        } throws: { error in
            guard let e = error as? AudioError else { return false }
            return e.code == .invalidFormat && e.message.contains(field)
        }
    }

    @Test func rejectsByteSizesThatDoNotMatch() throws {
        func check(_ field: String, bytesPerFrame: Int, bytesPerPacket: Int, framesPerPacket: Int) {
            #expect {
                try StreamFormat(
                    sampleRate: 48_000, channelCount: 2, sampleType: .int16, interleaved: true,
                    bytesPerFrame: bytesPerFrame, bytesPerPacket: bytesPerPacket, framesPerPacket: framesPerPacket)
            } throws: { error in
                (error as? AudioError).map { $0.code == .invalidFormat && $0.message.contains(field) } ?? false
            }
        }
        check("bytesPerFrame", bytesPerFrame: 2, bytesPerPacket: 4, framesPerPacket: 1)
        check("bytesPerPacket", bytesPerFrame: 4, bytesPerPacket: 8, framesPerPacket: 1)
        check("framesPerPacket", bytesPerFrame: 4, bytesPerPacket: 4, framesPerPacket: 1024)
        // Consistent sizes are accepted.
        let ok = try StreamFormat(
            sampleRate: 48_000, channelCount: 2, sampleType: .int16, interleaved: true, bytesPerFrame: 4,
            bytesPerPacket: 4, framesPerPacket: 1)
        #expect(ok == StreamFormat.stereo44kInt16.withRate(48_000))
    }

    @Test func description() throws {
        #expect(StreamFormat.stereo44kInt16.description == "44.1 kHz stereo 16-bit integer, interleaved")
        #expect(try StreamFormat.graph(sampleRate: 48_000, channelCount: 1).description == "48 kHz mono 32-bit float")
    }
}

extension StreamFormat {
    func withRate(_ rate: Double) -> StreamFormat {
        try! StreamFormat(sampleRate: rate, channelCount: channelCount, sampleType: sampleType, interleaved: isInterleaved)
    }
}

@Suite struct AudioErrorTests {
    @Test func fourCharacterCodes() {
        #expect(AudioError.Code.invalidFormat.rawValue == 0x666D_743F)  // 'fmt?', stable across releases
        #expect(FourCharCode.describe(0x666D_743F) == "'fmt?'")
        #expect(FourCharCode.describe(-10868) == "-10868")  // kAudioUnitErr_FormatNotSupported: not printable
        #expect(FourCharCode.describe(0) == "0")
        #expect(FourCharCode.describe(0x7479_703F) == "'typ?'")
    }

    @Test func messageAndCode() {
        let e = AudioError(.cycle, "a → b → a")
        #expect(e.description == "a → b → a ['cyc!']")
        #expect(Set([AudioError.Code.invalidFormat, .formatMismatch, .invalidParameter, .invalidProperty, .invalidBus,
            .invalidNode, .cycle, .invalidState, .tooManyFrames, .fileIO, .unsupportedFile, .corruptFile,
            .invalidGraphDescription, .unsupportedSampleRate].map(\.rawValue)).count == 14)
    }
}
