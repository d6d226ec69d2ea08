// The ES module entry point: the same classes as the CommonJS one (index.js), so that a lock,
// an error class or `instanceof` means the same whichever way the package was loaded.
import redquorum from './index.js'

export const {
  Redlock,
  Lock,
  ExecutionError,
  ResourceLockedError,
  UnavailableError,
  QuarantinedError,
  WrongTypeError,
  TooSlowError,
  NotHeldError,
  LockLostError,
  NotFencedError,
  ConfigError
} = redquorum

export default Redlock
