/*===- contract.h - what ties a package's binary to its manifest --*- C -*-===*
 *
 * A package's manifest records the hash of its contract (the manifest
 * without its "integrity" member) and the SHA-256 of each binary file, and
 * every binary exports the array `linac_contract`: LINAC_CONTRACT_PREFIX
 * followed by the contract hash in 64 hex digits. The runtime checks all of
 * them before a kernel runs (docs/runtime.md).
 *
 *===----------------------------------------------------------------------===*/

#ifndef LINAC_CONTRACT_H
#define LINAC_CONTRACT_H

#define LINAC_CONTRACT_PREFIX "linac-contract:"
#define LINAC_CONTRACT_SYMBOL "linac_contract"

#endif /* LINAC_CONTRACT_H */
