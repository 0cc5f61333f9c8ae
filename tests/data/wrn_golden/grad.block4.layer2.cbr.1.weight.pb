Bgrad.block4.layer2.cbr.1.weightJ00ßÌ<G­³<Ó‡=õC
;1™d=#6»ô¢m½Ò÷¤=HO›¼âl-;?
½–Ù;=