import AudioDevices
import AudioUnits

/// A session's configuration as its room's and its take's.
extension KaraokeSession.Configuration {
    /// The room's part of the configuration.
    var roomConfiguration: KaraokeRoom.Configuration {
        var r = KaraokeRoom.Configuration()
        r.voiceChain = voiceChain
        r.unitRegistry = unitRegistry
        r.sampleRate = sampleRate
        r.channelCount = channelCount
        r.backend = backend
        r.inputDevice = inputDevice
        r.outputDevice = outputDevice
        r.periodFrames = periodFrames
        r.periodCount = periodCount
        r.jackServer = jackServer
        r.pipeWireRemote = pipeWireRemote
        r.virtual = virtual
        r.reconnect = reconnect
        r.reconnectTimeout = reconnectTimeout
        r.clocks = clocks
        r.accompanimentVolume = accompanimentVolume
        r.voiceVolume = voiceVolume
        r.monitorVoiceVolume = monitorVoiceVolume
        r.offHeadphones = offHeadphones
        r.voiceProcessing = voiceProcessing
        r.recordPath = recordPath
        r.outputs = outputs
        r.bitRate = bitRate
        r.rtmp = rtmp
        r.roundTrip = roundTrip
        r.cycleTimingCapacity = cycleTimingCapacity
        return r
    }

    /// The take's part of the configuration.
    var takeConfiguration: KaraokeTake.Configuration {
        var t = KaraokeTake.Configuration(song: song)
        t.region = region
        t.regionInSeconds = regionInSeconds
        t.keyCents = keyCents
        t.tempo = tempo
        t.keyAdjustable = keyAdjustable
        t.chart = chart
        t.part = part
        t.difficulty = difficulty
        t.accompanimentLoudness = accompanimentLoudness
        t.accompanimentTruePeak = accompanimentTruePeak
        t.loudnessCache = loudnessCache
        t.stemsDirectory = stemsDirectory
        return t
    }
}
