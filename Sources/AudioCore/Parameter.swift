import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What a parameter's number means; shown in messages and documentation.
public enum ParameterUnit: String, Sendable, CaseIterable {
    case decibels = "dB"
    case linearGain = "linear gain"
    case hertz = "Hz"
    /// Hundredths of a semitone (1200 to the octave).
    case cents = "cents"
    case seconds = "s"
    case milliseconds = "ms"
    case percent = "%"
    case pan = "pan"
    case boolean = "on/off"
    case generic = ""

    func format(_ value: Float) -> String {
        let number = value == value.rounded() && abs(value) < 1e9 ? String(Int(value)) : String(value)
        switch self {
        case .generic, .pan, .linearGain: return number
        case .boolean: return value != 0 ? "on" : "off"
        default: return "\(number) \(rawValue)"
        }
    }
}

/// A parameter's declaration: identifier, range, unit, default, and how fast changes are smoothed.
public struct ParameterSpec: Sendable, Hashable {
    public let identifier: String
    public let name: String
    public let range: ClosedRange<Float>
    public let unit: ParameterUnit
    public let defaultValue: Float
    /// Seconds over which the render thread ramps to a new value; 0 applies it at the next cycle.
    public let smoothingTime: Double

    public init(
        _ identifier: String, name: String, range: ClosedRange<Float>, unit: ParameterUnit, default defaultValue: Float,
        smoothingTime: Double = 0.02
    ) {
        precondition(range.contains(defaultValue), "default of \(identifier) outside its range")
        self.identifier = identifier
        self.name = name
        self.range = range
        self.unit = unit
        self.defaultValue = defaultValue
        self.smoothingTime = smoothingTime
    }

    /// `"−96 dB … 24 dB"`.
    public var rangeDescription: String { "\(unit.format(range.lowerBound)) … \(unit.format(range.upperBound))" }
}

/// A live parameter: any thread sets it, the render thread reads the target and ramps toward it.
///
/// Thread safety: ``set(_:)`` and ``value`` may be called from any thread; the value is one atomic word.
public final class Parameter: Sendable {
    public let spec: ParameterSpec
    /// The unit kind that owns the parameter, for error messages.
    public let owner: String
    private let bits: Atomic<UInt32>

    public init(_ spec: ParameterSpec, owner: String) {
        self.spec = spec
        self.owner = owner
        bits = Atomic(spec.defaultValue.bitPattern)
    }

    public var identifier: String { spec.identifier }

    /// The most recently set value: the target the render thread ramps toward.
    @inline(__always)
    public var value: Float { Float(bitPattern: bits.load(ordering: .relaxed)) }

    /// Sets a new target value.
    /// - Throws: ``AudioError`` `.invalidParameter` naming the unit, the parameter and its range when `newValue` is
    ///   outside the range or not a number.
    public func set(_ newValue: Float) throws(AudioError) {
        guard !newValue.isNaN, spec.range.contains(newValue) else {
            throw AudioError(
                .invalidParameter,
                "\(owner): parameter '\(spec.identifier)' = \(spec.unit.format(newValue)) is out of range "
                    + "\(spec.rangeDescription)")
        }
        bits.store(newValue.bitPattern, ordering: .relaxed)
    }
}

/// A value that moves linearly to its target over a fixed number of samples: the render-thread side of a
/// parameter. Changes take effect at the next ``setTarget(_:)``, so output does not depend on the block size
/// as long as targets change only between blocks.
public struct SmoothedValue: Sendable {
    public var value: Float { current }
    public var targetValue: Float { target }
    @usableFromInline var current: Float
    @usableFromInline var target: Float
    @usableFromInline var step: Float = 0
    @usableFromInline var remaining = 0
    /// Samples a ramp takes.
    public var rampFrames: Int

    public init(_ value: Float, rampFrames: Int) {
        current = value
        target = value
        self.rampFrames = max(rampFrames, 0)
    }

    /// Starts a ramp toward `newTarget` if it differs from the current target.
    @inlinable
    public mutating func setTarget(_ newTarget: Float) {
        guard newTarget != target else { return }
        target = newTarget
        if rampFrames == 0 {
            current = newTarget
            remaining = 0
        } else {
            remaining = rampFrames
            step = (newTarget - current) / Float(rampFrames)
        }
    }

    /// Jumps to `value` with no ramp.
    public mutating func reset(to value: Float) {
        current = value
        target = value
        remaining = 0
    }

    public var isRamping: Bool { remaining > 0 }

    /// Moves `frames` samples along the ramp at once and returns the value reached: for units that update
    /// coefficients at control rate (every few dozen samples) rather than per sample.
    @inlinable
    public mutating func advance(by frames: Int) -> Float {
        if remaining > 0 {
            if frames >= remaining {
                remaining = 0
                current = target
            } else {
                remaining -= frames
                current += step * Float(frames)
            }
        }
        return current
    }

    /// The next sample's value.
    @inlinable
    public mutating func next() -> Float {
        if remaining > 0 {
            remaining -= 1
            current = remaining == 0 ? target : current + step
        }
        return current
    }
}

/// Decibels to linear gain; −∞ dB (and anything at or below −144 dB) is 0.
@inlinable
public func decibelsToGain(_ dB: Float) -> Float { dB <= -144 ? 0 : powf(10, dB / 20) }

/// Linear gain to decibels; 0 gives −∞.
@inlinable
public func gainToDecibels(_ gain: Float) -> Float { 20 * log10f(gain) }
