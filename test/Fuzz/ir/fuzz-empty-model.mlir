muon.model @m { }
