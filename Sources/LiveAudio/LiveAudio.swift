// LiveAudio: the umbrella module. `import LiveAudio` brings in the whole stack.
@_exported import AudioCodecs
@_exported import AudioCore
@_exported import AudioDevices
@_exported import AudioGraph
@_exported import AudioUnits
@_exported import MediaContainers
@_exported import RTMP
@_exported import SingAlong
