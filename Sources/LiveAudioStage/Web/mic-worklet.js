// The microphone's capture for mic.js: each render quantum's frames (128) with the audio context's frame count at
// their start, to the page.
class Capture extends AudioWorkletProcessor {
  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (channel) this.port.postMessage({ frame: currentFrame, samples: channel.slice(0) });
    return true;
  }
}
registerProcessor("la-capture", Capture);
