/**
 * Which network addresses outbound requests may reach (decisions §6): only global unicast
 * addresses, unless the operator's allow-list (`WEBHOOK_ALLOWED_CIDRS`) admits a range.
 * Loopback, private, link-local (cloud metadata 169.254.169.254 included), CGNAT,
 * multicast, unspecified, reserved and the IPv6 equivalents are refused.
 */
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

type Range = [ipaddr.IPv4 | ipaddr.IPv6, number];

export class AddressPolicy {
  private readonly allowed: Range[];

  /** Throws on a malformed CIDR, so a bad `WEBHOOK_ALLOWED_CIDRS` stops start-up. */
  constructor(allowedCidrs: readonly string[]) {
    this.allowed = allowedCidrs.map((cidr) => {
      try {
        const [address, bits] = ipaddr.parseCIDR(cidr);
        return [normalise(address), address.kind() === 'ipv6' && normalise(address).kind() === 'ipv4' ? bits - 96 : bits];
      } catch {
        throw new Error(`WEBHOOK_ALLOWED_CIDRS: "${cidr}" is not a CIDR such as 10.0.0.0/8 or ::1/128`);
      }
    });
  }

  /** Whether `ip` (an IP literal) may be connected to; a non-IP string never may. */
  permits(ip: string): boolean {
    if (!ipaddr.isValid(ip)) return false;
    if (this.allowListed(ip)) return true;
    return normalise(ipaddr.parse(ip)).range() === 'unicast';
  }

  /** Whether the operator's allow-list itself admits `ip` (not merely its being public). */
  allowListed(ip: string): boolean {
    if (!ipaddr.isValid(ip)) return false;
    const address = normalise(ipaddr.parse(ip));
    return this.allowed.some(([range, bits]) => range.kind() === address.kind() && address.match(range, bits));
  }

  /** Why `ip` is refused, for delivery records and validation messages. */
  refusal(ip: string): string {
    const kind = ipaddr.isValid(ip) ? normalise(ipaddr.parse(ip)).range() : 'invalid';
    return `address ${ip} (${kind}) is refused: only public addresses and those WEBHOOK_ALLOWED_CIDRS admits may be reached`;
  }
}

/** IPv4-mapped IPv6 (`::ffff:127.0.0.1`) is judged as the IPv4 address it carries. */
function normalise(address: ipaddr.IPv4 | ipaddr.IPv6): ipaddr.IPv4 | ipaddr.IPv6 {
  return address.kind() === 'ipv6' && (address as ipaddr.IPv6).isIPv4MappedAddress() ? (address as ipaddr.IPv6).toIPv4Address() : address;
}

/** An IP literal from a URL host (`[::1]` → `::1`), or null for a host name. */
export function ipLiteral(host: string): string | null {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  return isIP(bare) !== 0 ? bare : null;
}
