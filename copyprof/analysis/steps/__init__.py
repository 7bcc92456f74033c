"""Steps: a trace's GPU timeline split into engine steps, by annotation, graph launch or idle gap."""
